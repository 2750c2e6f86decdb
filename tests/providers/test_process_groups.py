"""The host runtime signals a process group only while it is still the attempt's: a recorded
pgid whose number now belongs to another group (pid reuse) is left alone by `release`,
`terminate` and the reaper, while what is left of the attempt's own group is still killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from apps.jobs.models import Attempt
from apps.providers.backends.local import LocalBackend
from apps.providers.models import Provider
from runner import procfs
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args

MARKERS = ["TRAINYARD_JOB_ID=job_groups", "TRAINYARD_ATTEMPT=1"]


@pytest.fixture
def groups():
    """Start process groups (each a new session) and kill whatever is left of them after."""
    started: list[int] = []

    def start(command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        process = subprocess.Popen(
            ["sh", "-c", command], start_new_session=True, env={**os.environ, **(env or {})}
        )
        started.append(process.pid)
        return process

    yield start
    for pgid in started:
        for pid in procfs.group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _exited_runner_handle(tmp_path) -> dict:
    """The handle of a runner that has exited (and been reaped) since it was recorded."""
    runner = subprocess.Popen(["sleep", "0.2"], start_new_session=True)
    info = procfs.stat(runner.pid)
    runner.wait()
    return {
        "pid": runner.pid,
        "pgid": runner.pid,
        "start_ticks": info.start_ticks,
        "workdir": str(tmp_path),
        "markers": MARKERS,
    }


def _backend() -> LocalBackend:
    return LocalBackend({"runtime": "host"})


def _still_alive(pids: list[int], seconds: float) -> bool:
    """Whether every one of `pids` is still running after `seconds` (a reaper's time)."""
    time.sleep(seconds)
    return all(procfs.alive(pid) for pid in pids)


@pytest.mark.parametrize("forged", ["pgid", "pid_and_pgid"])
def test_a_reused_group_number_is_left_alone_by_release_terminate_and_the_reaper(
    tmp_path, groups, forged
):
    handle = _exited_runner_handle(tmp_path)
    unrelated = groups("sleep 60")
    wait_until(lambda: procfs.alive(unrelated.pid), 5, what="the unrelated group")
    assert procfs.stat(unrelated.pid).start_ticks != handle["start_ticks"]
    handle["pgid"] = unrelated.pid  # the number the runner's group had, now another's
    if forged == "pid_and_pgid":
        handle["pid"] = unrelated.pid

    backend = _backend()
    backend.release(handle)
    backend.terminate(handle, grace_s=0.2)  # a detached reaper: give it its time
    assert _still_alive([unrelated.pid], 1.5)

    # The reaper itself, run here: it checks before each signal too.
    procfs.reap(handle["pgid"], handle["pid"], handle["start_ticks"], MARKERS, grace_s=0.2)
    assert _still_alive([unrelated.pid], 0.2)
    assert unrelated.poll() is None


def test_a_group_whose_leader_is_the_recorded_process_is_killed(tmp_path, groups):
    process = groups("sleep 60")
    wait_until(lambda: procfs.alive(process.pid), 5, what="the group")
    handle = {
        "pid": process.pid,
        "pgid": process.pid,
        "start_ticks": procfs.stat(process.pid).start_ticks,
        "workdir": str(tmp_path),
    }
    _backend().release(handle)
    assert process.wait(5) == -signal.SIGKILL


def test_a_leaderless_group_is_killed_only_where_it_carries_the_attempts_markers(tmp_path, groups):
    # Two groups whose leaders (`sh`) exited and were reaped, leaving a `sleep` each: one
    # is the attempt's workload left behind by its runner, the other is a stranger's.
    ours = groups("sleep 60 & exit 0", env=dict(m.split("=", 1) for m in MARKERS))
    theirs = groups("sleep 60 & exit 0")
    ours.wait(5)
    theirs.wait(5)
    wait_until(lambda: procfs.group_members(ours.pid), 5, what="our leftover")
    wait_until(lambda: procfs.group_members(theirs.pid), 5, what="their leftover")
    [our_leftover] = procfs.group_members(ours.pid)
    [their_leftover] = procfs.group_members(theirs.pid)
    backend = _backend()
    for leader in (ours, theirs):
        handle = _exited_runner_handle(tmp_path)
        handle.update(pid=leader.pid, pgid=leader.pid)
        backend.release(handle)

    wait_until(lambda: not procfs.alive(our_leftover), 5, what="our leftover to be killed")
    assert _still_alive([their_leftover], 0.5)


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_runner_killed_alone_leaves_a_workload_that_release_still_kills(
    settings, tmp_path, live_server
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    Provider.objects.filter(name="local").update(config={"runtime": "host"})
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, _ = launch_args(
        org, image="local", control_url=live_server.url, command=[sys.executable, "-c", SLEEPER]
    )
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(
            lambda: Attempt.objects.filter(
                job__public_id=request.job_id, started_at__isnull=False
            ).exists(),
            30,
            what="the workload",
        )
        [workload] = [pid for pid in procfs.group_members(handle["pgid"]) if pid != handle["pid"]]
        os.kill(handle["pid"], signal.SIGKILL)  # the runner alone: the workload lives on
        wait_until(lambda: backend.poll(handle).state == "lost", 10, what="the runner to die")
        assert procfs.alive(workload)

        backend.release(handle)

        wait_until(lambda: not procfs.alive(workload), 5, what="the workload to be killed")
    finally:
        for pid in procfs.group_members(handle["pgid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


SLEEPER = "import time; time.sleep(120)"
