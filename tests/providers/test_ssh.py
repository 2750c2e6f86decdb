"""The SSH provider against a real sshd on loopback (the far host is this machine): racing
launches start one runner, a wrong host key or a refused private key is a permanent error
that says so, a host that goes away mid-run is never a lost workload, and the runner token
is in no argv, environment or log."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.catalog.models import Offer
from apps.jobs import services
from apps.jobs.execution import reconcile, supervision
from apps.jobs.models import Attempt, Job
from apps.providers.backends import backend_for
from apps.providers.backends.base import (
    OfferInfo,
    PermanentBackendError,
    RetryableBackendError,
)
from apps.providers.backends.ssh import SshBackend
from apps.providers.backends.ssh_transport import SshTransport
from runner import procfs
from tests.factories import OrganizationFactory
from tests.jobs.helpers import make_job, running
from tests.live import free_port, wait_until
from tests.providers.helpers import launch_args
from tests.providers.ssh_fixtures import ssh_config
from tests.providers.sshd import keygen


def _launch_args(live_server, command: list[str]):
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image="local", control_url=live_server.url, command=command
    )
    assert attempt.provider.kind == "ssh"
    return backend, request, bootstrap, attempt


def _started(request) -> bool:
    return Attempt.objects.filter(job__public_id=request.job_id, started_at__isnull=False).exists()


def _runners_of(job_id: str) -> list[int]:
    """The runner processes (the bundle run by the far host's python) of a job, here."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [arg for arg in argv if arg]
        # The bundle, run from the memfd its sha256 check filled (runner.verify).
        runner = len(args) == 2 and args[1].startswith(b"/proc/self/fd/")
        if runner and procfs.environ_has(int(entry), [f"TRAINYARD_JOB_ID={job_id}"]):
            found.append(int(entry))
    return found


# -- connecting ------------------------------------------------------------------------------


def test_check_connects_and_reports_the_far_python(sshd, ssh_state, tmp_path):
    backend = SshBackend(ssh_config(sshd, tmp_path), {"private_key": sshd.private_key})
    began = time.monotonic()
    lines = backend.check()
    # The first call opens the shared connection; ssh's background master must not hold
    # the call's output pipes open until it ends.
    assert time.monotonic() - began < 10
    assert lines[0] == f"connected to {sshd.user}@127.0.0.1:{sshd.port}"
    assert lines[1].startswith("/usr/bin/python3: Python 3.")
    assert backend.offers() == [OfferInfo("cpu", [1], capacity=2)]  # no GPUs here: slots


def test_the_key_files_are_private_and_the_host_key_pinned_for_its_port(sshd, ssh_state, tmp_path):
    backend = SshBackend(ssh_config(sshd, tmp_path), {"private_key": sshd.private_key})
    backend.check()
    home = Path(ssh_state) / backend.transport.digest
    assert (home / "known_hosts").read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_key}\n"
    assert (home / "id").stat().st_mode & 0o777 == 0o600
    assert home.stat().st_mode & 0o777 == 0o700
    argv = backend.transport.ssh_argv("true")
    assert argv[:3] == ["ssh", "-F", "/dev/null"]
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", "IdentitiesOnly=yes"):
        assert option in argv


def test_the_host_key_may_be_given_as_a_whole_known_hosts_line(sshd, ssh_state, tmp_path):
    line = f"[127.0.0.1]:{sshd.port} {sshd.host_key} root@somewhere"
    backend = SshBackend(
        ssh_config(sshd, tmp_path, host_key=line), {"private_key": sshd.private_key}
    )
    assert backend.check()[0].startswith("connected to")


def test_a_host_key_that_does_not_match_the_pinned_one_is_refused(sshd, ssh_state, tmp_path):
    _, other_public = keygen(tmp_path / "impostor")
    wrong = " ".join(other_public.split()[:2])
    backend = SshBackend(
        ssh_config(sshd, tmp_path, host_key=wrong), {"private_key": sshd.private_key}
    )
    with pytest.raises(PermanentBackendError, match="does not match the pinned host key") as err:
        backend.check()
    assert "127.0.0.1" in str(err.value)
    assert "update `host_key`" in str(err.value)
    with pytest.raises(PermanentBackendError, match="does not match"):
        backend.transport.run(["true"])
    # Nothing was learnt: the pinned key is still the only one.
    home = Path(ssh_state) / backend.transport.digest
    assert (home / "known_hosts").read_text().split()[1:] == wrong.split()


def test_a_private_key_the_host_refuses_is_permission_denied(sshd, ssh_state, tmp_path):
    stranger, _ = keygen(tmp_path / "stranger")
    backend = SshBackend(ssh_config(sshd, tmp_path), {"private_key": stranger})
    with pytest.raises(PermanentBackendError, match="permission denied") as err:
        backend.check()
    assert "authorized_keys" in str(err.value)


def test_no_python_there_is_permanent(sshd, ssh_state, tmp_path):
    backend = SshBackend(
        ssh_config(sshd, tmp_path, python="/nonexistent/python3"),
        {"private_key": sshd.private_key},
    )
    with pytest.raises(PermanentBackendError, match="no usable /nonexistent/python3"):
        backend.check()


def test_a_host_that_is_down_is_retryable(sshd, ssh_state, tmp_path):
    backend = SshBackend(
        ssh_config(sshd, tmp_path, port=free_port()), {"private_key": sshd.private_key}
    )
    handle = {"workdir": str(tmp_path / "nothing"), "host": "the test host"}
    with pytest.raises(RetryableBackendError, match="Connection refused"):
        backend.poll(handle)
    with pytest.raises(RetryableBackendError, match="Connection refused"):
        backend.poll_many([handle, {**handle, "workdir": str(tmp_path / "other")}])
    with pytest.raises(RetryableBackendError):
        backend.terminate(handle, 1)
    [line] = backend.diagnostics(handle)  # never raises
    assert line.startswith("could not read the runner's log on the test host")


# -- running ---------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_four_racing_launches_start_one_runner(ssh_provider, sshd, live_server):
    backend, request, bootstrap, attempt = _launch_args(live_server, ["sleep", "30"])
    # Four workers, four backends and four ssh connections.
    backends = [backend_for(attempt.provider) for _ in range(4)]
    handles: list[dict] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(4)

    def launch(one):
        gate.wait()
        try:
            handles.append(one.launch(request, bootstrap))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=launch, args=(one,)) for one in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    try:
        assert len(handles) == 4 and all(handle == handles[0] for handle in handles)
        handle = handles[0]
        assert handle["host"] == f"{sshd.user}@127.0.0.1:{sshd.port}"
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        assert _runners_of(request.job_id) == [handle["pid"]]
        assert backend.poll(handle).state == "running"
    finally:
        for handle in handles[:1]:
            backend.release(handle)
    wait_until(lambda: not procfs.group_members(handles[0]["pgid"]), 10, what="the runner gone")


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_workload_outlives_its_host_sshd_and_is_never_lost(ssh_provider, sshd, live_server):
    backend, request, bootstrap, attempt = _launch_args(
        live_server, ["bash", "-c", "sleep 4; echo done"]
    )
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        sshd.stop()  # the listener and every connection it served, the shared one included
        try:
            assert procfs.alive(handle["pid"], handle["start_ticks"])
            while procfs.alive(handle["pid"], handle["start_ticks"]):
                with pytest.raises(RetryableBackendError):
                    backend.poll(handle)  # never `lost` while the host cannot be asked
                time.sleep(0.5)
        finally:
            sshd.start()
        result = backend.poll(handle)
        assert (result.state, result.exit_code) == ("exited", 0)
    finally:
        backend.release(handle)
    attempt.refresh_from_db()
    assert attempt.exit_code == 0  # the runner reported its exit over HTTP meanwhile
    lines = list(attempt.job.log_lines.filter(source="user").values_list("message", flat=True))
    assert lines == ["done"]


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_token_is_in_no_argv_environment_or_log(ssh_provider, live_server):
    backend, request, bootstrap, _attempt = _launch_args(live_server, ["sleep", "30"])
    token = bootstrap.token
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        workdir = Path(handle["workdir"])
        ps = subprocess.run(["ps", "-wweo", "args"], capture_output=True, text=True, check=True)
        runner_argv = " ".join(Path(f"/proc/{handle['pid']}/cmdline").read_text().split("\0"))
        assert runner_argv.strip() in ps.stdout  # the runner's whole command line is listed
        assert token not in ps.stdout
        members = procfs.group_members(handle["pgid"])
        assert handle["pid"] in members and len(members) == 2
        for pid in members:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert token.encode() not in environ
            assert b"TRAINYARD_RUNNER_TOKEN=" not in environ
        runner_env = Path(f"/proc/{handle['pid']}/environ").read_bytes().split(b"\0")
        assert f"TRAINYARD_RUNNER_TOKEN_FILE={workdir / 'runner.token'}".encode() in runner_env
        assert not (workdir / "runner.token").exists()  # read and deleted by the runner
        for name in ("runner.log", "handle.json"):
            assert token not in (workdir / name).read_text()
        assert token not in str(handle)
        log = (workdir / "runner.log").read_text().splitlines()
        assert backend.diagnostics(handle) == log[-20:]
    finally:
        backend.release(handle)


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_host_out_of_reach_loses_the_attempt_only_once_its_runner_is_silent_too(
    ssh_provider, sshd, live_server, settings
):
    backend, request, bootstrap, attempt = _launch_args(live_server, ["sleep", "60"])
    services.job_transition(job_id=attempt.job_id, to="provisioning")
    handle = backend.launch(request, bootstrap)
    Attempt.objects.filter(pk=attempt.pk).update(handle=handle, launched_at=timezone.now())
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        sshd.stop()
        try:
            # Out of reach, but the runner still beats over HTTP: nothing is decided.
            with pytest.raises(RetryableBackendError):
                supervision.supervise(attempt.pk)
            attempt.refresh_from_db()
            assert (attempt.ended_at, attempt.job.state) == (None, "running")

            # The host is gone for good: no heartbeat for longer than the timeout.
            os.killpg(handle["pgid"], 9)
            silent_since = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_S + 1)
            Attempt.objects.filter(pk=attempt.pk).update(last_heartbeat_at=silent_since)
            with pytest.raises(RetryableBackendError):
                supervision.supervise(attempt.pk)
        finally:
            sshd.start()
        attempt.refresh_from_db()
        job = attempt.job
        assert attempt.end_reason == "reclaimed"
        assert (job.state, job.reason) in {("preempted", "reclaimed"), ("requested", "reclaimed")}
        lost = job.events.get(type="workload_lost")
        assert "out of reach" in lost.message
    finally:
        backend.release(handle)


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_reconcile_pass_asks_the_host_once_about_all_its_attempts(
    ssh_provider, live_server, monkeypatch
):
    """Three live attempts on one host: one SSH command polls them all (`hostctl
    poll-many`), and each job goes where its own answer says: the running one stays, the
    one that exited 5 fails with code 5, the one killed without an exit record is reclaimed."""
    Offer.objects.filter(provider=ssh_provider).update(capacity=8)
    org = OrganizationFactory(compute_enabled=True)
    commands: list[list[str]] = []
    real_run = SshTransport.run

    def counted_run(self, argv, **kwargs):
        commands.append(list(argv))
        return real_run(self, argv, **kwargs)

    def launch(command: list[str]):
        backend, request, bootstrap, attempt = launch_args(
            org, image="local", control_url=live_server.url, command=command
        )
        services.job_transition(job_id=attempt.job_id, to="provisioning")
        handle = backend.launch(request, bootstrap)
        handles.append(handle)
        Attempt.objects.filter(pk=attempt.pk).update(handle=handle, launched_at=timezone.now())
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        return backend, attempt, handle

    handles: list[dict] = []
    try:
        backend, running, _ = launch(["sleep", "60"])
        _, failing, failing_handle = launch(["bash", "-c", "sleep 1; exit 5"])
        _, killed, killed_handle = launch(["sleep", "60"])
        os.killpg(killed_handle["pgid"], 9)  # gone with no exit record
        wait_until(lambda: backend.poll(failing_handle).state == "exited", 30, what="exit 5")
        wait_until(lambda: backend.poll(killed_handle).state == "lost", 10, what="the kill")

        monkeypatch.setattr(SshTransport, "run", counted_run)
        reconcile.reconcile()

        ops = [argv[argv.index("hostctl") :][:2] for argv in commands if "hostctl" in argv]
        polls = [op for op in ops if len(op) == 2]
        assert [op for op in polls if op[1].startswith("poll")] == [["hostctl", "poll-many"]]
        jobs = {a.pk: Job.objects.get(pk=a.job_id) for a in (running, failing, killed)}
        assert jobs[running.pk].state == "running"
        assert Attempt.objects.get(pk=running.pk).ended_at is None
        assert (jobs[failing.pk].state, jobs[failing.pk].exit_code) == ("failed", 5)
        assert (jobs[killed.pk].state, jobs[killed.pk].reason) == ("preempted", "reclaimed")
        assert Attempt.objects.get(pk=killed.pk).end_reason == "reclaimed"
    finally:
        for handle in handles:
            backend.release(handle)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_pass_over_a_host_out_of_reach_loses_only_the_attempts_whose_runners_are_silent(
    ssh_provider, settings
):
    """The host cannot be asked about any of its attempts (one poll_many, refused): nothing
    is lost for that alone; an attempt whose runner is silent past the heartbeat timeout too
    is given up as unreachable, the one still beating stays running."""
    Offer.objects.filter(provider=ssh_provider).update(capacity=8)
    org = OrganizationFactory(compute_enabled=True)
    attempts = []
    for _ in range(2):
        job = make_job(org, compute={"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1})
        attempts.append(running(job, handle={"workdir": f"/nowhere/{job.public_id}"}))
    beating, silent = attempts
    silent_since = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_S + 1)
    Attempt.objects.filter(pk=silent.pk).update(last_heartbeat_at=silent_since)
    ssh_provider.config = {**ssh_provider.config, "port": free_port()}  # nothing listens
    ssh_provider.save()

    live = Attempt.objects.filter(ended_at__isnull=True).select_related("provider", "job")
    assert supervision.supervise_many(live) == 2

    beating.refresh_from_db()
    silent.refresh_from_db()
    assert (beating.ended_at, beating.job.state) == (None, "running")
    assert (silent.end_reason, silent.job.reason) == ("reclaimed", "reclaimed")
    lost = silent.job.events.get(type="workload_lost")
    assert lost.data == {"reason": "unreachable"}
    assert "out of reach" in lost.message
