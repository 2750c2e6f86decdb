"""Into a running job with real OpenSSH clients: the SSH gateway (`manage.py ssh_gateway`),
a live stack, and a container job on podman whose runner carries the sessions."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
import requests

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.jobs import services
from apps.jobs.models import Job, JobEvent
from apps.jobs.states import TERMINAL_STATES
from apps.providers.models import Provider
from tests.factories import MembershipFactory, OrganizationFactory
from tests.integration.conftest import UNTIL_LET_GO, let_go
from tests.integration.stack import wait_for
from tests.live import free_port

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def podman(live_stack, podman_image) -> str:
    """The local provider on podman for this test. Its jobs end before the provider goes
    back to the host runtime: a container job supervised as a host one never ends."""
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    live_stack.start_gateway()
    yield podman_image
    for job in Job.objects.exclude(state__in=TERMINAL_STATES):
        services.job_terminate(job=job)
    wait_for(
        lambda: not Job.objects.exclude(state__in=TERMINAL_STATES).exists(),
        timeout=60,
        what="the test's container jobs to end",
    )
    Provider.objects.filter(name="local").update(config={})


@pytest.fixture
def client_key(tmp_path) -> tuple[Path, str]:
    """An Ed25519 key pair made by ssh-keygen: (private key path, public line)."""
    path = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tester", "-f", str(path)],
        check=True,
    )
    return path, path.with_suffix(".pub").read_text().strip()


def _options(key: Path) -> list[str]:
    return [
        "-F",
        "/dev/null",
        "-i",
        str(key),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
    ]


def ssh_argv(stack, key: Path, job_id: str, *extra: str) -> list[str]:
    return ["ssh", *_options(key), "-p", str(stack.gateway_port), *extra, f"{job_id}@127.0.0.1"]


def scp_argv(stack, key: Path) -> list[str]:
    return ["scp", *_options(key), "-P", str(stack.gateway_port)]


def _running_job(api, image: str, public_line: str, script: str = UNTIL_LET_GO) -> dict:
    job = api.submit(
        image=image,
        command=["bash", "-c", script],
        env={"GREETING": "hello from the job"},
        access={"ssh_public_key": public_line},
    )
    api.wait_state(job["id"], {"running"}, timeout=90)
    return job


def test_exec_runs_in_the_jobs_container_as_its_user_with_its_environment(
    api, podman, live_stack, client_key
):
    key, public = client_key
    job = _running_job(api, podman, public)
    shown = api.job(job["id"])["ssh"]
    assert shown["port"] == live_stack.gateway_port and shown["user"] == job["id"]
    inside = subprocess.run(
        [
            *ssh_argv(live_stack, key, job["id"]),
            "grep ^ID= /etc/os-release; id -un; printenv TRAINYARD_JOB_ID GREETING; pwd; exit 7",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inside.returncode == 7, inside.stderr + _runner_log(job["id"])
    expected_user = subprocess.run(
        ["podman", "exec", _container_of(job["id"]), "id", "-un"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lines = inside.stdout.splitlines()
    assert lines[0] == "ID=debian"
    assert lines[1] == expected_user
    assert lines[2:4] == [job["id"], "hello from the job"]
    assert lines[4].endswith("/work")
    events = list(JobEvent.objects.filter(job__public_id=job["id"]).values_list("type", "data"))
    opened = [data for kind, data in events if kind == "ssh_session_opened"]
    assert opened and opened[0]["who"] == "the job's access key"
    assert opened[0]["fingerprint"].startswith("SHA256:")
    wait_for(
        lambda: JobEvent.objects.filter(
            job__public_id=job["id"], type="ssh_session_closed"
        ).exists(),
        timeout=15,
        what="the session's close on the timeline",
    )
    let_go(live_stack, job["id"])


def _read_until(fd: int, needle: bytes, timeout: float = 30) -> bytes:
    """What the terminal printed up to and including `needle`."""
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} never came; the terminal showed {seen[-400:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_a_terminal_session_follows_a_resize_and_files_go_in_and_out_with_scp(
    api, podman, live_stack, client_key, tmp_path
):
    key, public = client_key
    job = _running_job(api, podman, public)
    master, slave = pty.openpty()
    _set_size(slave, 24, 80)
    client = subprocess.Popen(
        ssh_argv(live_stack, key, job["id"], "-tt"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        os.write(master, b"stty size; echo READY-$((40+2))\r")
        assert b"24 80" in _read_until(master, b"READY-42")
        _set_size(master, 40, 120)
        client.send_signal(signal.SIGWINCH)

        def resized() -> bool:
            # ssh sends the new size when it handles the signal, which may be after the
            # next keystrokes it reads: ask until the shell sees it.
            os.write(master, b"stty size; echo SIZED-$((40+3))\r")
            return b"40 120" in _read_until(master, b"SIZED-43")

        wait_for(resized, timeout=30, what="the shell to see the new size", interval=0)
        os.write(master, b"exit 0\r")
        assert client.wait(timeout=30) == 0
    finally:
        client.kill()
        os.close(master)

    payload = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "in.bin").write_bytes(payload)
    scp = scp_argv(live_stack, key)
    target = f"{job['id']}@127.0.0.1"
    subprocess.run(
        [*scp, str(tmp_path / "in.bin"), f"{target}:uploaded.bin"], check=True, timeout=120
    )
    subprocess.run(
        [*scp, f"{target}:uploaded.bin", str(tmp_path / "back.bin")], check=True, timeout=120
    )
    assert (tmp_path / "back.bin").read_bytes() == payload
    inside = live_stack.workdir / "work" / job["id"] / "attempt-1" / "work" / "uploaded.bin"
    assert inside.read_bytes() == payload
    let_go(live_stack, job["id"])


SERVE_ON_LOOPBACK = (
    "mkdir -p site && echo 'served from inside the job' > site/hello.txt && "
    "(cd site && exec python3 -m http.server 8765 --bind 127.0.0.1) & " + UNTIL_LET_GO
)


def test_a_local_forward_reaches_a_server_on_the_workloads_own_loopback(
    api, podman, live_stack, client_key
):
    key, public = client_key
    job = _running_job(api, podman, public, script=SERVE_ON_LOOPBACK)
    local = free_port()
    forward = subprocess.Popen(
        [*ssh_argv(live_stack, key, job["id"], "-N", "-L", f"{local}:localhost:8765")],
        stderr=subprocess.PIPE,
    )
    try:

        def fetched() -> str | None:
            try:
                answer = requests.get(f"http://127.0.0.1:{local}/hello.txt", timeout=5)
            except requests.RequestException:
                return None
            return answer.text if answer.status_code == 200 else None

        assert wait_for(fetched, timeout=60, what="the page through the forward") == (
            "served from inside the job\n"
        )
        # The host itself has nothing there: the page came from the job's own network.
        with pytest.raises(requests.ConnectionError):
            requests.get("http://127.0.0.1:8765/hello.txt", timeout=2)
    finally:
        forward.terminate()
        forward.wait(timeout=10)
    let_go(live_stack, job["id"])


def _keypair(path: Path) -> tuple[Path, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path, path.with_suffix(".pub").read_text().strip()


def _member_with_key(organization, role: str, path: Path) -> tuple[Path, str]:
    key, public = _keypair(path)
    member = MembershipFactory(organization=organization, role=role).user
    account_services.ssh_key_add(organization=organization, user=member, public_key=public)
    return key, member.email


def _runs(stack, key: Path, job_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ssh_argv(stack, key, job_id), "echo in"], capture_output=True, text=True, timeout=60
    )


def test_only_the_jobs_key_and_its_members_keys_get_in_and_a_session_ends_with_the_job(
    api, podman, live_stack, client_key, compute_org, tmp_path
):
    key, public = client_key
    job = _running_job(api, podman, public)
    member_key, member_email = _member_with_key(compute_org, Role.MEMBER, tmp_path / "member")
    viewer_key, _ = _member_with_key(compute_org, Role.VIEWER, tmp_path / "viewer")
    outsider_key, _ = _member_with_key(OrganizationFactory(), Role.OWNER, tmp_path / "outsider")
    stranger_key, _ = _keypair(tmp_path / "stranger")

    member = _runs(live_stack, member_key, job["id"])
    assert (member.returncode, member.stdout) == (0, "in\n"), member.stderr + _runner_log(job["id"])
    for refused_key in (viewer_key, outsider_key, stranger_key):
        refused = _runs(live_stack, refused_key, job["id"])
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
    # A job that does not exist is refused the same way as a wrong key.
    nobody = _runs(live_stack, key, "job_doesnotexist")
    assert nobody.returncode == 255 and "Permission denied" in nobody.stderr
    opened = JobEvent.objects.filter(job__public_id=job["id"], type="ssh_session_opened")
    assert [event.data["who"] for event in opened] == [member_email]

    held = subprocess.Popen(
        [*ssh_argv(live_stack, key, job["id"]), "echo inside; sleep 600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.stdout.readline() == "inside\n"
        api.terminate(job["id"])
        held.wait(timeout=60)
        assert held.returncode != 0
        assert f"job {job['id']} was terminated" in held.stderr.read()
    finally:
        held.kill()
    closed = JobEvent.objects.filter(job__public_id=job["id"], type="ssh_session_closed")
    wait_for(lambda: closed.count() >= 2, timeout=15, what="the session's close on the timeline")
    reasons = [event.data["reason"] for event in closed.order_by("id")]
    assert len(reasons) == 2 and "terminated" in reasons[1], reasons


# Prints who it runs as, then waits to be entered.
WHO_THEN_WAIT = 'echo "runs as $(id -un)"; sleep 600'


def _exec_matches_the_workload(api, stack, client_key, image: str = "local") -> None:
    key, public = client_key
    stack.start_gateway()
    job = api.submit(
        image=image,
        command=["bash", "-c", WHO_THEN_WAIT],
        env={"GREETING": "hello"},
        access={"ssh_public_key": public},
    )
    api.wait_state(job["id"], {"running"}, timeout=90)
    first = wait_for(
        lambda: next(iter(api.logs(job["id"], source="user")), None),
        timeout=60,
        what="the workload's first line",
    )
    inside = subprocess.run(
        [*ssh_argv(stack, key, job["id"]), 'echo "runs as $(id -un)"; printenv GREETING'],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.splitlines() == [first["message"], "hello"]
    api.terminate(job["id"])


def test_exec_reaches_a_job_on_the_ssh_provider(ssh_provider, api, live_stack, client_key):
    _exec_matches_the_workload(api, live_stack, client_key)


def test_exec_reaches_a_job_on_the_slurm_provider(
    slurm_provider, slurm_cluster, api, live_stack, client_key
):
    _exec_matches_the_workload(api, live_stack, client_key)


def _runner_log(job_id: str) -> str:
    """What the runner of the job's container said (its stderr), to explain a failure."""
    names = _containers(job_id)
    if not names:
        return "\n(no container left to ask)"
    logs = subprocess.run(["podman", "logs", names[0]], capture_output=True, text=True)
    return f"\nthe runner said:\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}"


def _containers(job_id: str) -> list[str]:
    from tests.containers import containers_of_job

    return containers_of_job(job_id)


def _container_of(job_id: str) -> str:
    from tests.containers import containers_of_job

    return containers_of_job(job_id)[0]
