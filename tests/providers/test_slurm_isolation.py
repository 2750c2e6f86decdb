"""One organization's job on a Slurm cluster cannot reach the next one's (T3-3), on the real
single-node cluster: a runner bundle a workload wrote over never runs (slurmctl and the batch
job check its sha256; the next launch replaces it), the attempt's directory is gone at
release, and with `isolation: users` two organizations' jobs run as two Unix users of their
own, made and removed by the root helper (runner/attempt_user.py) as an operator installs
it."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest
from django.utils import timezone

from apps.jobs.models import Attempt
from apps.providers.backends import single_tenant
from apps.providers.backends.bundle import bundle_name, runner_bundle
from apps.providers.models import Provider
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args, reachable_by_everyone

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HELPER_SOURCE = Path(__file__).resolve().parents[2] / "runner" / "attempt_user.py"


def _launch(live_server, command: list[str]):
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image="local", control_url=live_server.url, command=command
    )
    handle = backend.launch(request, bootstrap)
    # The control plane's record: launched (a dispatcher of a live stack leaves it alone).
    Attempt.objects.filter(pk=attempt.pk).update(handle=handle, launched_at=timezone.now())
    return backend, request, handle


def _started(request) -> bool:
    return Attempt.objects.filter(job__public_id=request.job_id, started_at__isnull=False).exists()


def _runner_uid(handle) -> int:
    pid = int((Path(handle.get("run") or handle["workdir"]) / "runner.pid").read_text())
    return os.stat(f"/proc/{pid}").st_uid


def test_a_bundle_a_job_overwrote_never_runs_and_its_planted_files_are_gone(
    slurm_provider, slurm_cluster, live_server, tmp_path
):
    bundle = Path(slurm_provider.config["work_dir"]) / ".trainyard" / bundle_name()
    ran = tmp_path / "tampered-bundle-ran"
    evil = f"open({str(ran)!r}, 'w').write('ran')"
    plant = f"printf '%s\\n' \"{evil}\" > {bundle}; echo mine > planted; echo mine > ../planted"
    backend, first, handle = _launch(live_server, ["sh", "-c", plant])
    ended = lambda: slurm_cluster.job_state(handle["job_id"]) in (None, "COMPLETED")  # noqa: E731
    wait_until(ended, 60, what="A's job done")
    tampered = bundle.read_bytes()
    assert tampered != runner_bundle()
    workdir = Path(handle["workdir"])
    assert list(workdir.rglob("planted"))
    backend.release(handle)
    assert not workdir.exists()
    Attempt.objects.filter(job__public_id=first.job_id).update(ended_at=timezone.now())
    bundle.write_bytes(tampered)  # as a process of A's that outlived its release would

    backend, second, handle = _launch(live_server, ["sh", "-c", "echo fine"])
    try:
        wait_until(lambda: _started(second), 60, what="B's runner's started report")
        assert bundle.read_bytes() == runner_bundle()  # B's launch replaced it first
        result = wait_until(
            lambda: (r := backend.poll(handle)).state == "exited" and r, 60, what="B's job"
        )
        assert result.exit_code == 0
        assert not ran.exists()
    finally:
        backend.release(handle)


@pytest.fixture
def isolated_provider(slurm_provider, tmp_path) -> Provider:
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    helper = sbin / "trainyard-attempt-user"
    shutil.copyfile(HELPER_SOURCE, helper)
    helper.chmod(0o755)
    reachable_by_everyone(Path(slurm_provider.config["work_dir"]))
    slurm_provider.config = {
        **slurm_provider.config,
        "isolation": "users",
        "multi_tenant": True,
        "attempt_user_helper": str(helper),
    }
    slurm_provider.save()
    assert not single_tenant(slurm_provider)
    return slurm_provider


def test_two_organizations_jobs_run_as_two_users_that_cannot_touch_the_runner(
    isolated_provider, slurm_cluster, live_server
):
    work_dir = Path(isolated_provider.config["work_dir"])
    bundle = work_dir / ".trainyard" / bundle_name()
    attack = (
        f"(printf evil > {bundle}) 2>/dev/null; (echo evil > {work_dir}/intruder) 2>/dev/null; "
        "sleep 30"
    )
    backend, first, a = _launch(live_server, ["sh", "-c", attack])
    _, second, b = _launch(live_server, ["sleep", "30"])
    users = [a["user"], b["user"]]
    try:
        wait_until(lambda: _started(first) and _started(second), 90, what="both runners")
        uids = [_runner_uid(handle) for handle in (a, b)]
        assert uids == [pwd.getpwnam(user).pw_uid for user in users]
        assert len(set(uids)) == 2 and 0 not in uids and os.getuid() not in uids
        jobs = slurm_cluster.run("squeue", "-h", "-o", "%i %u").stdout.split("\n")
        assert {f"{a['job_id']} {users[0]}", f"{b['job_id']} {users[1]}"} <= set(jobs)
        assert backend.poll(a).state == "running"
        assert bundle.read_bytes() == runner_bundle()  # the job could not write it
        assert not (work_dir / "intruder").exists()
    finally:
        for handle in (a, b):
            backend.release(handle)
    for handle, user in zip((a, b), users, strict=True):
        assert not Path(handle["workdir"]).exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
