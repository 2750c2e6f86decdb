"""The host runtime hands the runner its token in a file, never in an environment: a workload
running as the runner's own unprivileged user finds it neither in the runner's
/proc/<pid>/environ (nor its memory: the runner is not dumpable) nor in the work directory."""

from __future__ import annotations

import pytest

from apps.providers.models import Provider
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args, reachable_by_everyone, run_to_exit

# The workload knows the token only as hex (its argv is logged): it reports what it can read.
LOOK = """
import os, pathlib, sys
token = bytes.fromhex(sys.argv[1])
for name in ("environ", "mem"):
    try:
        data = open(f"/proc/{os.getppid()}/{name}", "rb").read(4096 if name == "mem" else -1)
        print(name, "read", token in data)
    except OSError as exc:
        print(name, exc.strerror)
workdir = pathlib.Path.cwd().parent
names = sorted(p.name for p in workdir.iterdir())
holding = [p.name for p in workdir.rglob("*") if p.is_file() and token in p.read_bytes()]
print("runner.token" in names, holding)
"""


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_workload_of_the_runners_user_cannot_reach_the_token(settings, tmp_path, live_server):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    reachable_by_everyone(tmp_path)  # the work root, for the unprivileged runner
    Provider.objects.filter(name="local").update(
        config={"runtime": "host", "python": "/usr/bin/python3"}
    )
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image="local", control_url=live_server.url, command=["true"]
    )
    job = attempt.job
    job.spec["container"]["command"] = [
        "/usr/bin/python3",
        "-c",
        LOOK,
        bootstrap.token.encode().hex(),
    ]
    job.save(update_fields=["spec"])
    workdir = tmp_path / "work" / request.job_id / "attempt-1"
    _, lines = run_to_exit(backend, request, bootstrap)
    assert lines[-1] == "False []"  # no runner.token left, no file holding the token
    assert lines == ["environ Permission denied", "mem Permission denied", "False []"]
    assert not (workdir / "runner.token").exists()


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_container_gets_the_token_files_path_and_never_the_token(
    settings, tmp_path, live_server, podman_image
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image=podman_image, control_url=live_server.url, command=["true"]
    )
    job = attempt.job
    job.spec["container"]["command"] = ["python3", "-c", LOOK, bootstrap.token.encode().hex()]
    job.save(update_fields=["spec"])
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: backend.poll(handle).state != "running", 60, what="the container")
        assert backend.poll(handle).exit_code == 0
        inspected = backend.containers.cli(
            "container", "inspect", "--format", "{{json .Config.Env}}", handle["container"]
        ).stdout
        assert "TRAINYARD_RUNNER_TOKEN_FILE=/work/runner.token" in inspected
        assert bootstrap.token not in inspected and "TRAINYARD_RUNNER_TOKEN=" not in inspected
    finally:
        backend.release(handle)
    lines = list(job.log_lines.filter(source="user").values_list("message", flat=True))
    assert lines[0] in {"environ read False", "environ Permission denied"}
    assert lines[-1] == "False []"
    assert not (tmp_path / "work" / request.job_id / "attempt-1" / "runner.token").exists()
