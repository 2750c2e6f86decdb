"""Detached runners on a host: what the local backend's `host` runtime does in-process, and
what the SSH backend runs on a far host as `python3 runner-….pyz hostctl OP ARGS...`.

Standard library only. Each op prints one JSON object on stdout and exits 0; a usage error
exits 2 with a message on stderr.

- `launch WORKDIR`, JSON on stdin `{"token", "env", "python", "bundle", "markers",
  "inherit"}`: under an exclusive `flock` on WORKDIR/launch.lock, when WORKDIR/handle.json
  exists it is printed and nothing starts (a second launch of an attempt is a no-op).
  Else the token goes to WORKDIR/runner.token (mode 0600, created exclusively, no
  symlink followed) and `python bundle` starts detached: a new session, stdin /dev/null,
  stdout and stderr to WORKDIR/runner.log, every other descriptor closed (an SSH channel
  never stays open behind it), environment exactly `env`, the far host's own values of
  the names in `inherit` (HOME, ...), and TRAINYARD_RUNNER_TOKEN_FILE (the token is in no
  environment and no argv). Its handle `{pid, pgid, start_ticks, workdir, markers}` is
  written atomically to handle.json and printed.
- `poll WORKDIR`: `{"state": "running"}` while the recorded runner (pid and start time)
  lives; else `exited` with exit.json's code; else `lost`.
- `poll-many`, JSON on stdin `{"workdirs": [...]}`: `{"results": [...]}`, what `poll`
  answers for each work directory, in their order (one SSH round trip for every attempt on
  the host); a directory that cannot be read gets `{"error": message}` in its place.
- `terminate WORKDIR GRACE`: starts a detached reaper (`runner.procfs.reap`: SIGTERM, then
  SIGKILL after GRACE seconds, each signal only to the recorded group) and returns at once.
- `release WORKDIR`: SIGKILLs what is left of the recorded group, deletes a token file
  that no runner read.
- `diagnostics WORKDIR`: `{"lines": [...]}`, the last lines of runner.log.
- `capacity`: `{"gpus": N}`, the GPUs `nvidia-smi -L` lists (0 without it).
- `reap PGID PID TICKS GRACE MARKERS...`: the reaper itself (what `terminate` starts).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner import procfs
from runner.protocol import ENV_RUNNER_TOKEN_FILE

Handle = dict[str, Any]
HANDLE_FILE = "handle.json"
LOCK_FILE = "launch.lock"
LOG_FILE = "runner.log"
# In the attempt's work directory until the runner has read it (it deletes it then).
TOKEN_FILE = "runner.token"
DIAGNOSTIC_LINES = 20


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created when missing) for the block's duration."""
    with open(path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_handle(workdir: Path) -> Handle | None:
    """The handle a launch recorded in `workdir`, or None."""
    try:
        return json.loads((workdir / HANDLE_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically (readers see the old file or the whole new one)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def write_token(workdir: Path, token: str) -> Path:
    """Write the runner token to a file of the work directory only its owner may read, and
    return its path. A file left by an earlier try is replaced; a symlink is never followed."""
    path = workdir / TOKEN_FILE
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token)
    return path


def recorded_exit(workdir: Path) -> int | None:
    """The exit code the runner wrote to `exit.json`, or None."""
    try:
        return int(json.loads((workdir / "exit.json").read_text())["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def spawn_runner(
    argv: Sequence[str],
    workdir: Path,
    env: Mapping[str, str],
    markers: Sequence[str],
    run_as: tuple[int, int] | None = None,
) -> Handle:
    """Start `argv` detached (new session, stdin /dev/null, output to runner.log, no other
    descriptor) in `workdir` with exactly `env`, and return its handle. `run_as`: the
    (uid, gid) it runs as, with no supplementary groups, when not the caller's. Raises
    OSError."""
    argv, switch = as_user(argv, run_as)
    with open(workdir / LOG_FILE, "ab") as log:
        process = subprocess.Popen(
            argv,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            **switch,
        )
    info = procfs.stat(process.pid)
    return {
        "pid": process.pid,
        "pgid": process.pid,
        "start_ticks": info.start_ticks if info else None,
        "workdir": str(workdir),
        # What only this attempt's workload carries: it tells its processes apart once
        # the runner (the group's leader) is gone.
        "markers": list(markers),
    }


def as_user(
    argv: Sequence[str], run_as: tuple[int, int] | None
) -> tuple[list[str], dict[str, Any]]:
    """`argv` and the Popen options that start it as `run_as` (uid, gid; no supplementary
    groups): through util-linux's `setpriv` where it is installed, else by Popen's own
    user/group switch. Popen switches in the child of a fork(), which copies the caller's
    page tables (a Celery worker of a few hundred MB: ~3.5 ms of its CPU per runner);
    without a switch it can vfork() (~0.1 ms), and setpriv, exec'd in place, drops real,
    effective and saved ids and every capability the same way."""
    if run_as is None:
        return list(argv), {}
    uid, gid = run_as
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        return list(argv), {"user": uid, "group": gid, "extra_groups": []}
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv], {}


def group_of(handle: Handle) -> tuple[int, int, int | None, list[str]]:
    """A handle's process group as `procfs.group_targets` takes it: pgid, the leader's pid
    and start time, and the markers of the attempt's workload (none in old handles)."""
    return (
        int(handle["pgid"]),
        int(handle["pid"]),
        handle.get("start_ticks"),
        list(handle.get("markers") or []),
    )


def state_of(handle: Handle) -> dict[str, Any]:
    """What became of the runner `handle` names: `{"state": "running"}`, `exited` with its
    `exit_code`, or `lost` with a `detail`."""
    if procfs.alive(handle["pid"], handle.get("start_ticks")):
        return {"state": "running"}
    exit_code = recorded_exit(Path(handle["workdir"]))
    if exit_code is None:
        return {"state": "lost", "detail": "the runner is gone and left no exit record"}
    return {"state": "exited", "exit_code": exit_code}


def reaper_argv(python: str, handle: Handle, grace_s: float) -> list[str]:
    """The command line of a detached reaper for `handle`'s group: `procfs.py` run as a
    script, or, where the runner is a zipapp (a far host), the bundle's `hostctl reap`."""
    group = group_of(handle)
    home = os.path.dirname(os.path.dirname(os.path.abspath(procfs.__file__)))
    if not os.path.isfile(home):
        return procfs.reaper_argv(python, *group, grace_s)
    pgid, leader, ticks, markers = group
    ticks_arg = "" if ticks is None else str(ticks)
    return [
        python,
        "-I",
        home,
        "hostctl",
        "reap",
        str(pgid),
        str(leader),
        ticks_arg,
        str(grace_s),
        *markers,
    ]


def start_reaper(python: str, handle: Handle, grace_s: float) -> bool:
    """Start a detached reaper for `handle`'s group unless the group is gone or is another
    one now; returns at once. True when one was started."""
    group = group_of(handle)
    if not procfs.group_members(group[0]) or not procfs.group_targets(*group):
        return False
    subprocess.Popen(
        reaper_argv(python, handle, grace_s),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return True


def kill_leftovers(handle: Handle) -> None:
    """SIGKILL what is left of `handle`'s group (only while it is the recorded one) and
    delete a token file that no runner read."""
    procfs.signal_group(*group_of(handle), signal.SIGKILL)
    (Path(handle["workdir"]) / TOKEN_FILE).unlink(missing_ok=True)


def log_tail(workdir: Path, lines: int = DIAGNOSTIC_LINES) -> list[str]:
    """The last `lines` lines of the runner's log ([] when there is none)."""
    try:
        with open(workdir / LOG_FILE, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def gpu_count() -> int:
    """How many GPUs `nvidia-smi -L` lists; 0 without nvidia-smi or when it fails."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return 0
    try:
        listing = subprocess.run(
            [binary, "-L"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


# -- the ops --------------------------------------------------------------------------------


def launch(workdir: Path, request: Mapping[str, Any]) -> Handle:
    """The `launch` op (see the module's docstring)."""
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with locked(workdir / LOCK_FILE):
        existing = read_handle(workdir)
        if existing is not None:
            return existing
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
        for name in request.get("inherit") or []:
            if name in os.environ and name not in env:
                env[name] = os.environ[name]
        token_file = write_token(workdir, str(request["token"]))
        env[ENV_RUNNER_TOKEN_FILE] = str(token_file)
        argv = [str(request.get("python") or sys.executable), str(request["bundle"])]
        try:
            handle = spawn_runner(argv, workdir, env, request.get("markers") or [])
        except OSError:
            token_file.unlink(missing_ok=True)  # no runner will read it
            raise
        write_json(workdir / HANDLE_FILE, handle)
        return handle


def poll(workdir: Path) -> dict[str, Any]:
    """The `poll` op: what became of the runner launched in `workdir`."""
    handle = read_handle(workdir)
    if handle is None:
        return {"state": "lost", "detail": f"no runner was launched in {workdir}"}
    return state_of(handle)


def poll_many(workdirs: Sequence[str]) -> list[dict[str, Any]]:
    """The `poll-many` op: `poll` of each work directory, in order; one that fails (an
    unreadable handle) answers `{"error": message}` and the others are still answered."""
    results: list[dict[str, Any]] = []
    for workdir in workdirs:
        try:
            results.append(poll(Path(str(workdir))))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}"})
    return results


def _op(op: str, args: list[str]) -> dict[str, Any]:
    if op == "launch" and len(args) == 1:
        return launch(Path(args[0]), json.load(sys.stdin))
    if op == "poll" and len(args) == 1:
        return poll(Path(args[0]))
    if op == "poll-many" and not args:
        request = json.load(sys.stdin)
        workdirs = request.get("workdirs") if isinstance(request, dict) else None
        if not isinstance(workdirs, list):
            raise ValueError('hostctl poll-many reads {"workdirs": [...]} on stdin')
        return {"results": poll_many(workdirs)}
    if op == "terminate" and len(args) == 2:
        handle = read_handle(Path(args[0]))
        started = handle is not None and start_reaper(sys.executable, handle, float(args[1]))
        return {"reaper": started}
    if op == "release" and len(args) == 1:
        handle = read_handle(Path(args[0]))
        if handle is not None:
            kill_leftovers(handle)
        (Path(args[0]) / TOKEN_FILE).unlink(missing_ok=True)
        return {"released": handle is not None}
    if op == "diagnostics" and len(args) == 1:
        return {"lines": log_tail(Path(args[0]))}
    if op == "capacity" and not args:
        return {"gpus": gpu_count()}
    if op == "reap" and len(args) >= 4:
        procfs._main(args)
        return {}
    raise ValueError(
        f"usage: hostctl {{launch|poll|terminate|release|diagnostics}} WORKDIR | poll-many, "
        f"not {op} {' '.join(args)}"
    )


def main(argv: list[str]) -> int:
    """Run one op; print its JSON answer. 0 on success, 2 on a usage error, 1 otherwise."""
    if not argv:
        print("usage: hostctl OP ARGS...", file=sys.stderr)
        return 2
    try:
        answer = _op(argv[0], argv[1:])
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except (OSError, KeyError) as exc:
        print(f"hostctl {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
