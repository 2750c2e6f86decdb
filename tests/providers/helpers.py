"""Launching one attempt straight through a backend, as dispatch would."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from apps.jobs.execution.dispatch import allocate
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt
from apps.providers.backends import backend_for
from apps.providers.backends.base import Backend, Bootstrap, LaunchRequest
from apps.providers.backends.transport import Transport
from tests.jobs.helpers import make_job


def launch_args(
    org, *, image: str, control_url: str, command: list[str], secret_env: dict | None = None
) -> tuple[Backend, LaunchRequest, Bootstrap, Attempt]:
    """A job of `org` running `command` in `image` (with `secret_env`), allocated; what
    `launch` takes for it."""
    container = {"image": image, "command": command, "secret_env": secret_env or {}}
    job = make_job(org, container=container)
    attempt = allocate(job.pk)
    request = LaunchRequest(
        job_id=job.public_id,
        attempt=1,
        accelerator="cpu",
        gpu_count=1,
        ephemeral_disk_gb=1,
        image=image,
    )
    bootstrap = Bootstrap(
        control_url=control_url,
        job_id=job.public_id,
        attempt=1,
        token=token_for(attempt.token_nonce),
    )
    return backend_for(attempt.provider), request, bootstrap, attempt


def run_to_exit(
    backend: Backend, request: LaunchRequest, bootstrap: Bootstrap
) -> tuple[dict, list[str]]:
    """Launch, wait for the runner to end with exit code 0, release: the handle, and the
    workload's own log lines in order."""
    from apps.jobs.models import Job
    from tests.live import wait_until

    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: backend.poll(handle).state != "running", 30, what="the runner")
        assert backend.poll(handle).exit_code == 0
    finally:
        backend.release(handle)
    job = Job.objects.get(public_id=request.job_id)
    return handle, list(job.log_lines.filter(source="user").values_list("message", flat=True))


def reachable_by_everyone(path: Path) -> None:
    """Let an unprivileged runner reach `path`: pytest makes its temporary directories
    private to the user running the tests."""
    path.chmod(0o755)
    for parent in path.parents:
        if str(parent).startswith("/tmp/pytest-of") and not parent.stat().st_mode & 0o001:
            parent.chmod(parent.stat().st_mode | 0o001)


class CountingTransport:
    """A real transport that keeps the argv of every command it runs (`commands`), for
    tests that count round trips."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.commands: list[list[str]] = []

    def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[bytes]:
        self.commands.append(list(argv))
        return self.inner.run(argv, input=input, timeout=timeout)

    def describe(self) -> str:
        return self.inner.describe()
