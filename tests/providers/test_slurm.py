"""The slurm backend on a real cluster (tests/providers/slurm_cluster.py): what only a batch
queue does (queueing, preemption, a controller restart, jobs that leave squeue), launches
racing each other, and where the runner token is not."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

import pytest

from apps.jobs.models import Attempt
from apps.providers.backends.base import PermanentBackendError, RetryableBackendError
from apps.providers.backends.slurm import SlurmBackend, job_name
from apps.providers.backends.transport import LocalTransport
from apps.providers.models import Provider
from runner import procfs
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import CountingTransport, launch_args
from tests.providers.slurm_cluster import LIVE_STATES
from tests.providers.sshd import keygen

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _launch(live_server, command: list[str], **config):
    """A job running `command` placed on the slurm provider (its config updated with
    `config`); the backend and what its `launch` takes."""
    if config:
        provider = Provider.objects.get(kind=Provider.Kind.SLURM)
        provider.config = {**provider.config, **config}
        provider.save()
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image="local", control_url=live_server.url, command=command
    )
    assert attempt.provider.kind == Provider.Kind.SLURM
    return backend, request, bootstrap


def _started(request) -> bool:
    return Attempt.objects.filter(job__public_id=request.job_id, started_at__isnull=False).exists()


def _polled(backend, handle, state: str, timeout: float = 30, detail=None):
    """The first poll that answers `state` (and, given `detail`, a detail among them)."""

    def check():
        result = backend.poll(handle)
        return result if result.state == state and (not detail or result.detail in detail) else None

    return wait_until(check, timeout, what=f"the attempt to poll {state}")


def test_concurrent_launches_of_an_attempt_submit_one_job(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, bootstrap = _launch(live_server, ["sleep", "30"])
    request = replace(request, max_runtime_hours=0.5)
    barrier = threading.Barrier(4)
    handles: list[dict] = []
    errors: list[BaseException] = []

    def launch():
        try:
            barrier.wait()
            handles.append(backend.launch(request, bootstrap))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not errors
        assert len(handles) == 4 and all(handle == handles[0] for handle in handles)
        name = job_name(request.job_id, request.attempt)
        assert handles[0]["name"] == name
        assert slurm_cluster.jobs_named(name) == [handles[0]["job_id"]]
        # The job's max runtime, and a margin for the control plane's own limit to act first.
        record = slurm_cluster.run("scontrol", "show", "job", handles[0]["job_id"]).stdout
        assert "TimeLimit=00:35:00" in record
        wait_until(lambda: _started(request), 30, what="the runner's started report")
    finally:
        backend.release(handles[0])


def test_an_attempt_behind_a_full_partition_is_queued_with_slurms_reason_then_runs(
    slurm_provider, slurm_cluster, live_server
):
    blocker = slurm_cluster.sbatch("--partition=low", "--cpus-per-task=2", "--wrap", "sleep 300")
    wait_until(lambda: slurm_cluster.job_state(blocker) == "RUNNING", 30, what="the blocker")
    backend, request, bootstrap = _launch(live_server, ["sleep", "30"])
    handle = backend.launch(request, bootstrap)
    try:
        queued = _polled(backend, handle, "queued", detail={"Resources", "Priority"})
        assert queued.exit_code is None
        assert not _started(request)
        slurm_cluster.run("scancel", blocker)
        _polled(backend, handle, "running")
        wait_until(lambda: _started(request), 30, what="the runner's started report")
    finally:
        backend.release(handle)


def test_a_pending_attempt_that_is_terminated_exits_143_without_running(
    slurm_provider, slurm_cluster, live_server
):
    blocker = slurm_cluster.sbatch("--partition=low", "--cpus-per-task=2", "--wrap", "sleep 300")
    wait_until(lambda: slurm_cluster.job_state(blocker) == "RUNNING", 30, what="the blocker")
    backend, request, bootstrap = _launch(live_server, ["sleep", "30"])
    handle = backend.launch(request, bootstrap)
    try:
        _polled(backend, handle, "queued")
        backend.terminate(handle, grace_s=5)
        result = _polled(backend, handle, "exited", timeout=10)
        assert result.exit_code == 143
        assert not _started(request)
    finally:
        backend.release(handle)
    # The token no runner read does not stay behind.
    assert not (Path(handle["workdir"]) / "runner.token").exists()


def test_an_attempt_preempted_by_a_higher_tier_partition_is_reclaimed(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, bootstrap = _launch(live_server, ["sleep", "60"])
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        slurm_cluster.sbatch("--partition=high", "--cpus-per-task=2", "--wrap", "sleep 300")
        result = _polled(backend, handle, "reclaimed")
        assert "PREEMPTED" in result.detail
        assert slurm_cluster.job_state(handle["job_id"]) == "PREEMPTED"
    finally:
        backend.release(handle)


def test_an_attempt_outlives_a_controller_restart_and_then_polls_its_exit(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, bootstrap = _launch(live_server, ["bash", "-c", "sleep 25; exit 5"])
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        slurm_cluster.stop_slurmctld()
        try:
            # A controller that does not answer is a retryable failure, never `lost`.
            with pytest.raises(RetryableBackendError, match="Unable to contact"):
                backend.poll(handle)
            with pytest.raises(RetryableBackendError, match="Unable to contact"):
                backend.poll_many([handle, handle])  # the whole batch: never `lost`
        finally:
            slurm_cluster.start_slurmctld()
        assert backend.poll(handle).state == "running"
        result = _polled(backend, handle, "exited", timeout=40)
        assert result.exit_code == 5
    finally:
        backend.release(handle)


def test_a_job_gone_from_squeue_is_resolved_through_its_exit_record(
    slurm_provider, slurm_cluster, live_server
):
    """Slurm forgets an ended job MinJobAge after it ended (60 s here, 300 by default); its
    number is then unknown to squeue, as a number Slurm never handed out is: the same
    answer, so this asks with such a number and does not wait a minute."""
    backend, request, bootstrap = _launch(live_server, ["bash", "-c", "echo hello; exit 4"])
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(
            lambda: slurm_cluster.job_state(handle["job_id"]) not in LIVE_STATES,
            90,
            what="the job to end",
        )
        forgotten = {**handle, "job_id": "999998"}
        assert slurm_cluster.job_state(forgotten["job_id"]) is None
        result = backend.poll(forgotten)
        assert (result.state, result.exit_code) == ("exited", 4)
        # Asked together with another job Slurm does not know: one squeue, each its own answer.
        counted = CountingTransport(LocalTransport())
        batch = SlurmBackend(backend.config, transport=counted)
        unknown = {**handle, "job_id": "999999", "workdir": str(Path(handle["workdir"]) / "x")}
        outcomes = batch.poll_many([forgotten, unknown])
        assert [(o.state, o.exit_code) for o in outcomes] == [("exited", 4), ("lost", None)]
        ops = [argv[argv.index("slurmctl") + 1] for argv in counted.commands if "slurmctl" in argv]
        assert ops == ["poll-many"]
        # Without the exit record nothing says what became of it.
        (Path(handle["workdir"]) / "exit.json").unlink()
        assert backend.poll(forgotten).state == "lost"
    finally:
        backend.release(handle)


def test_a_runner_that_never_ran_exits_with_slurms_code_and_says_why(
    slurm_provider, slurm_cluster, live_server, tmp_path
):
    # An interpreter that works on the login node but not in the job (a compute node
    # without python3, say).
    python = tmp_path / "python3"
    python.write_text(
        "#!/bin/sh\n"
        'if [ -n "$SLURM_JOB_ID" ]; then echo "no python3 on this node" >&2; exit 127; fi\n'
        'exec python3 "$@"\n'
    )
    python.chmod(0o755)
    backend, request, bootstrap = _launch(live_server, ["true"], python=str(python))
    handle = backend.launch(request, bootstrap)
    try:
        result = _polled(backend, handle, "exited")
        assert result.exit_code == 127
        lines = backend.diagnostics(handle)
        assert lines[0] == f"--- slurm-{handle['job_id']}.out"
        assert "no python3 on this node" in lines
    finally:
        backend.release(handle)


def test_the_runner_token_is_in_no_script_argv_environment_job_record_or_output(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, bootstrap = _launch(live_server, ["bash", "-c", "echo working; sleep 30"])
    token = bootstrap.token
    handle = backend.launch(request, bootstrap)
    workdir = Path(handle["workdir"])
    job_id = handle["job_id"]
    try:
        token_file = workdir / "runner.token"
        with suppress(FileNotFoundError):  # unless the runner already read and deleted it
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        assert not token_file.exists()
        seen = {
            "ps": subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout,
            "batch.sh": (workdir / "batch.sh").read_text(),
            "scontrol": slurm_cluster.run("scontrol", "show", "job", "-dd", job_id).stdout,
            "script": slurm_cluster.run("scontrol", "write", "batch_script", job_id, "-").stdout,
            "runner environ": Path(f"/proc/{_runner_pid(workdir)}/environ").read_text(),
        }
        assert "TRAINYARD_RUNNER_TOKEN_FILE" in seen["batch.sh"]
        assert str(workdir) in seen["scontrol"]
        wait_until(lambda: list(workdir.glob("slurm-*.out")), 30, what="the job's output file")
        seen.update({path.name: path.read_text() for path in workdir.glob("slurm-*.out")})
    finally:
        backend.release(handle)
    wait_until(lambda: slurm_cluster.job_state(job_id) != "RUNNING", 10, what="the job to end")
    assert any(name.startswith("slurm-") for name in seen)
    assert not workdir.exists()  # release deleted the attempt's directory
    for where, text in seen.items():
        assert token not in text, f"the token is in {where}"


def _runner_pid(workdir: Path) -> int:
    return int((workdir / "runner.pid").read_text())


def test_check_names_the_partition_or_what_is_wrong(slurm_provider, slurm_cluster, tmp_path):
    config = dict(slurm_provider.config)
    lines = SlurmBackend(config).check()
    assert lines[0].startswith("partition low (up): 1 node(s)")

    with pytest.raises(
        PermanentBackendError, match=r"no partition 'gpu' \(partitions: low, high\)"
    ):
        SlurmBackend({**config, "partition": "gpu"}).check()
    with pytest.raises(PermanentBackendError, match=r"^sinfo failed: .*missing.conf is not a file"):
        SlurmBackend({**config, "slurm_conf": str(tmp_path / "missing.conf")}).check()
    with pytest.raises(PermanentBackendError, match="must be an object"):
        SlurmBackend({**config, "login": "ops@login-1"}).check()

    offers = SlurmBackend({k: v for k, v in config.items() if k != "slots"}).offers()
    assert [(offer.accelerator, offer.capacity) for offer in offers] == [("cpu", 2)]


def test_a_slurm_provider_is_single_tenant_unless_its_attempts_have_users_of_their_own():
    assert SlurmBackend.single_tenant({})
    assert SlurmBackend.single_tenant({"multi_tenant": True})  # one Unix user for all
    assert not SlurmBackend.single_tenant({"multi_tenant": True, "isolation": "users"})
    assert SlurmBackend.ALLOCATES_AT_LAUNCH is False


def test_a_controller_crash_never_runs_the_workload_twice(
    slurm_provider, slurm_cluster, live_server
):
    """slurmctld saves its state lazily. Killed (SIGKILL) seconds after a job started and
    restarted, it may have forgotten the job (submitted after its last save: the number is
    free again), or recover it as PENDING, kill the batch step the node still runs and start
    the batch script again. The token file is gone by then (the first runner deleted it), so
    a second runner is refused before any workload starts; either way the attempt polls
    `lost`, and the control plane places the job again with a new attempt and token."""
    backend, request, bootstrap = _launch(
        live_server, ["bash", "-c", "echo run >> ../runs.txt; sleep 15"]
    )
    handle = backend.launch(request, bootstrap)
    workdir = Path(handle["workdir"])
    try:
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        slurm_cluster.restart_slurmctld(hard=True)
        result = wait_until(
            lambda: (r := backend.poll(handle)).state not in {"running", "queued"} and r,
            60,
            what="the attempt to end",
        )
        log = slurm_cluster.log("slurmctld")
        if f"Registered PENDING JobId={handle['job_id']} " in log:  # started again
            assert result.state == "lost", result
            output = "".join(path.read_text() for path in workdir.glob("slurm-*.out"))
            assert "cannot read TRAINYARD_RUNNER_TOKEN_FILE" in output
        elif f"Purged files for defunct batch JobId={handle['job_id']}" in log:  # forgotten
            assert result.state == "lost", result
        else:  # the start had been saved after all: the attempt ran on
            assert (result.state, result.exit_code) == ("exited", 0), log[-3000:]
        assert (workdir / "runs.txt").read_text() == "run\n"
    finally:
        backend.release(handle)
        slurm_cluster.settle_after_crash(handle["job_id"])


def test_a_job_number_slurm_gave_to_another_job_is_not_the_attempts(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, _ = _launch(live_server, ["sleep", "30"])
    other = slurm_cluster.sbatch("--job-name=someone-else", "--wrap", "sleep 300")
    wait_until(lambda: slurm_cluster.job_state(other) == "RUNNING", 30, what="the other job")
    workdir = Path(backend.workdir(request.job_id, request.attempt))
    workdir.mkdir(parents=True)
    # A handle whose number a controller that lost its state handed on.
    handle = {"job_id": other, "name": job_name(request.job_id, 1), "workdir": str(workdir)}

    result = backend.poll(handle)
    assert result.state == "lost" and "gone" in result.detail
    # scancel is synchronous: a job it cancelled or signalled is no longer RUNNING when it
    # returns (the terminate's later SIGKILL names the job the same way).
    backend.terminate(handle, grace_s=60)
    backend.release(handle)
    state = slurm_cluster.job_state(other)
    story = slurm_cluster.run("scontrol", "show", "job", other, check=False).stdout
    assert state == "RUNNING", f"{story}\n{slurm_cluster.logs()}"


def test_a_request_the_cluster_refuses_fails_the_launch_for_good(
    slurm_provider, slurm_cluster, live_server
):
    backend, request, bootstrap = _launch(live_server, ["true"])
    # The test cluster has no GPUs (no gres): sbatch refuses the job.
    request = replace(request, accelerator="nvidia-a100-80gb", gpu_count=2)
    with pytest.raises(PermanentBackendError, match=r"sbatch failed: .*gres"):
        backend.launch(request, bootstrap)
    workdir = Path(backend.workdir(request.job_id, request.attempt))
    assert not (workdir / "runner.token").exists()  # nothing will read it
    assert not (workdir / "handle.json").exists()
    assert slurm_cluster.jobs_named(job_name(request.job_id, request.attempt)) == []


def _login(sshd) -> dict:
    return {"host": sshd.host, "port": sshd.port, "user": sshd.user, "host_key": sshd.host_key}


def test_through_an_ssh_login_node_check_and_a_whole_attempt_work(
    slurm_provider, slurm_cluster, sshd, ssh_state, live_server
):
    provider = Provider.objects.get(pk=slurm_provider.pk)
    provider.config = {**provider.config, "login": _login(sshd)}
    provider.set_credentials({"private_key": sshd.private_key})
    provider.save()
    backend = SlurmBackend(provider.config, provider.credentials())
    assert backend.transport.describe() == f"{sshd.user}@127.0.0.1:{sshd.port}"
    assert backend.check()[0].startswith("partition low (up)")

    backend, request, bootstrap = _launch(live_server, ["bash", "-c", "echo far; exit 7"])
    handle = backend.launch(request, bootstrap)
    try:
        result = _polled(backend, handle, "exited", timeout=60)
        assert result.exit_code == 7
    finally:
        backend.release(handle)


def test_a_login_node_whose_host_key_does_not_match_is_refused(
    slurm_provider, sshd, ssh_state, tmp_path
):
    _, other = keygen(tmp_path / "other")
    config = {**slurm_provider.config, "login": {**_login(sshd), "host_key": other}}
    with pytest.raises(PermanentBackendError, match=r"(?i)host key"):
        SlurmBackend(config, {"private_key": sshd.private_key}).check()


def _processes_with(marker: str) -> list[int]:
    """Live processes here whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        with suppress(OSError):
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return [pid for pid in found if procfs.alive(pid)]


def test_a_terminated_workload_that_ignores_sigterm_leaves_no_process_on_the_node(
    slurm_provider, slurm_cluster, live_server, settings
):
    """The runner's and the cancel's grace used to end together: the runner died first and
    its kill reached only the `sh`, whose `sleep` (not Slurm's, under proctrack/linuxproc,
    once orphaned) ran on."""
    settings.TERMINATE_GRACE_S = 1  # the runner's (its spec's)
    marker = f"600.{time.monotonic_ns() % 10**9}"
    backend, request, bootstrap = _launch(
        live_server, ["sh", "-c", f"trap '' TERM; sleep {marker}"]
    )
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: len(_processes_with(marker)) >= 2, 30, what="the sh and its sleep")
        backend.terminate(handle, grace_s=1)
        wait_until(lambda: not _processes_with(marker), 10, what="the workload to be gone")
    finally:
        backend.release(handle)
        for pid in _processes_with(marker):  # what old code left running
            os.kill(pid, signal.SIGKILL)
