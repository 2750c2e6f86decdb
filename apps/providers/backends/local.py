"""The local provider: runs the runner as a detached process group on this host.

Each attempt gets a work directory `<LOCAL_WORK_DIR>/<job id>/attempt-<n>`; the runner is
started there in a new session, so it outlives web and worker restarts. Capacity is the
Offer's slot count (placement counts live attempts in the database).

- `launch` holds a file lock on the work directory and starts nothing if a runner for the
  attempt already ran or runs there (its `handle.json` names it): a redelivered task or a
  reconcile pass can never start the workload twice.
- `terminate` starts a small detached reaper (SIGTERM to the group, SIGKILL after the grace
  period) and returns at once, so no Celery task waits out a grace period.
- The runner's environment is built from scratch: the control plane's own variables
  (DATABASE_URL, SECRET_KEY, ...) never reach a workload.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from django.conf import settings

from apps.providers.backends import procfs
from apps.providers.backends.base import (
    Backend,
    Bootstrap,
    Handle,
    LaunchRequest,
    OfferInfo,
    PermanentBackendError,
    PollResult,
)

PASSED_THROUGH_ENV = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER")

# Runs detached: SIGTERM the group, wait for it to empty (zombies do not count), SIGKILL.
_REAPER = r"""
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
def members():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = open(f"/proc/{entry}/stat", "rb").read().decode(errors="replace")
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                found.append(entry)
    return found
try:
    os.killpg(pgid, signal.SIGTERM)
except ProcessLookupError:
    sys.exit(0)
deadline = time.monotonic() + grace
while members() and time.monotonic() < deadline:
    time.sleep(0.1)
if members():
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


class LocalBackend(Backend):
    kind = "local"

    @property
    def work_root(self) -> Path:
        return Path(self.config.get("work_dir") or settings.LOCAL_WORK_DIR)

    def workdir(self, job_id: str, attempt: int) -> Path:
        return self.work_root / job_id / f"attempt-{attempt}"

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        workdir = self.workdir(request.job_id, request.attempt)
        workdir.mkdir(parents=True, exist_ok=True)
        with _locked(workdir / "launch.lock"):
            existing = _read_handle(workdir)
            if existing is not None:
                return existing
            handle = self._start_runner(workdir, bootstrap)
            _write_json(workdir / "handle.json", handle)
            return handle

    def _start_runner(self, workdir: Path, bootstrap: Bootstrap) -> Handle:
        python = self.config.get("python") or sys.executable
        env = {name: os.environ[name] for name in PASSED_THROUGH_ENV if name in os.environ}
        env.update(
            {
                # The project's interpreter first, so `python` in a workload is ours.
                "PATH": os.pathsep.join(
                    [str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]
                ),
                "PYTHONPATH": str(settings.BASE_DIR),
                "PYTHONUNBUFFERED": "1",
                "TRAINYARD_CONTROL_URL": bootstrap.control_url,
                "TRAINYARD_JOB_ID": bootstrap.job_id,
                "TRAINYARD_RUNNER_TOKEN": bootstrap.token,
                "TRAINYARD_WORKDIR": str(workdir),
            }
        )
        try:
            with open(workdir / "runner.log", "ab") as log:
                process = subprocess.Popen(
                    [python, "-m", "runner"],
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as exc:
            raise PermanentBackendError(f"could not start the runner: {exc}") from exc
        info = procfs.stat(process.pid)
        return {
            "pid": process.pid,
            "pgid": process.pid,
            "start_ticks": info.start_ticks if info else None,
            "workdir": str(workdir),
        }

    def poll(self, handle: Handle) -> PollResult:
        if procfs.alive(handle["pid"], handle.get("start_ticks")):
            return PollResult("running")
        exit_record = Path(handle["workdir"]) / "exit.json"
        try:
            exit_code = int(json.loads(exit_record.read_text())["exit_code"])
        except (OSError, ValueError, KeyError):
            return PollResult("lost", detail="the runner is gone and left no exit record")
        return PollResult("exited", exit_code=exit_code)

    def terminate(self, handle: Handle, grace_s: float) -> None:
        if not procfs.group_members(handle["pgid"]):
            return
        subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(handle["pgid"]), str(grace_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def release(self, handle: Handle) -> None:
        """Nothing outlives an attempt: SIGKILL whatever is left of its process group. The
        work directory stays for inspection; the logs are already in the database."""
        if procfs.group_members(handle["pgid"]):
            with suppress(ProcessLookupError):
                os.killpg(handle["pgid"], 9)

    def offers(self) -> list[OfferInfo]:
        return [OfferInfo(accelerator="cpu", gpu_counts=[1], capacity=os.cpu_count() or 1)]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_handle(workdir: Path) -> Handle | None:
    try:
        return json.loads((workdir / "handle.json").read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)
