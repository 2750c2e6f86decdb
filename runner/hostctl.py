"""Detached runners on a host: what the local backend's `host` runtime does in-process, and
what the SSH backend runs on a far host as `python3 runner-….pyz hostctl OP ARGS...`.

Standard library only. Each op prints one JSON object on stdout and exits 0; a usage error
exits 2 with a message on stderr.

- `launch WORKDIR`, JSON on stdin `{"token", "env", "python", "bundle", "sha256",
  "markers", "inherit", "user", "helper"}`: under an exclusive `flock` on
  WORKDIR/launch.lock, when WORKDIR/handle.json exists it is printed and nothing starts
  (a second launch of an attempt is a no-op).
  Else the token goes to WORKDIR/runner.token (mode 0600, created exclusively, no
  symlink followed) and `python bundle` starts detached: a new session, stdin /dev/null,
  stdout and stderr to WORKDIR/runner.log, every other descriptor closed (an SSH channel
  never stays open behind it), environment exactly `env`, the far host's own values of
  the names in `inherit` (HOME, ...), and TRAINYARD_RUNNER_TOKEN_FILE (the token is in no
  environment and no argv). Its handle `{pid, pgid, start_ticks, workdir, markers}` is
  written atomically to handle.json and printed. With `sha256`, a bundle whose digest
  differs is refused (exit 1): the runner never runs a file a workload wrote over.
  With `user` (an attempt user's name) and `helper` (the root helper `runner.attempt_user`
  as installed, e.g. /usr/local/sbin/trainyard-attempt-user; through `sudo -n` unless
  hostctl is root), the attempt runs as a Unix user of its own: the helper creates it,
  WORKDIR/run (the runner's work directory, token inside) becomes its (mode 02750, group:
  the SSH user's, so hostctl still reads the exit record), and the runner starts through
  `helper exec USER env -i ...`. WORKDIR itself (lock, handle, runner.log) stays the SSH
  user's, 0711: the workload cannot rewrite what the control side reads.
- `poll WORKDIR`: `{"state": "running"}` while the recorded runner (pid and start time)
  lives; else `exited` with exit.json's code; else `lost`.
- `poll-many`, JSON on stdin `{"handles": [...]}` (the control plane's own records) or
  `{"workdirs": [...]}`: `{"results": [...]}`, what `poll` answers for each, in their order
  (one SSH round trip for every attempt on the host); one that cannot be read gets
  `{"error": message}` in its place.
- `terminate GRACE`, the handle as JSON on stdin: SIGTERM, then SIGKILL after GRACE seconds,
  by a detached reaper; returns at once. The recorded group only (`runner.procfs.reap`), or
  for an attempt user every process of its uid (the helper's `kill`).
- `release`, the handle as JSON on stdin: SIGKILLs what is left of the attempt, then deletes
  its work directory (nothing a workload planted reaches the next tenant) and, for an
  attempt user, the user. `terminate` and `release` act on the handle the control plane
  stored, never on a handle.json a workload could have rewritten.
- `diagnostics WORKDIR`: `{"lines": [...]}`, the last lines of runner.log.
- `capacity`: `{"gpus": N}`, the GPUs `nvidia-smi -L` lists (0 without it).
- `reap PGID PID TICKS GRACE MARKERS...`: the reaper itself (what `terminate` starts).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
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
from runner.verify import ENV_BUNDLE, ENV_BUNDLE_SHA256, verified_argv

Handle = dict[str, Any]
HANDLE_FILE = "handle.json"
LOCK_FILE = "launch.lock"
LOG_FILE = "runner.log"
# In the attempt's work directory until the runner has read it (it deletes it then).
TOKEN_FILE = "runner.token"
DIAGNOSTIC_LINES = 20
# An attempt user's own directory inside the attempt's (the runner's work directory).
RUN_DIR = "run"
HELPER_TIMEOUT_S = 60


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
    exit_code = recorded_exit(Path(handle.get("run") or handle["workdir"]))
    if exit_code is None:
        return {"state": "lost", "detail": "the runner is gone and left no exit record"}
    return {"state": "exited", "exit_code": exit_code}


def reaper_argv(python: str, handle: Handle, grace_s: float) -> list[str]:
    """The command line of a detached reaper for `handle`'s group: `procfs.py` run as a
    script, or, where the runner is a zipapp (a far host: `runner.verify` ran it), the
    bundle's `hostctl reap`, through the same sha256 check."""
    group = group_of(handle)
    bundle, sha256 = os.environ.get(ENV_BUNDLE), os.environ.get(ENV_BUNDLE_SHA256)
    if not (bundle and sha256):
        return procfs.reaper_argv(python, *group, grace_s)
    pgid, leader, ticks, markers = group
    ticks_arg = "" if ticks is None else str(ticks)
    args = ["hostctl", "reap", str(pgid), str(leader), ticks_arg, str(grace_s), *markers]
    return verified_argv(python, bundle, sha256, *args)


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


def helper_argv(helper: str) -> list[str]:
    """The root helper's argv: itself when this process is root, else through `sudo -n`
    (the operator's sudoers line lets the SSH user run it, and nothing else)."""
    return [helper] if os.geteuid() == 0 else ["sudo", "-n", helper]


def call_helper(helper: str, *args: str) -> dict[str, Any]:
    """Run one op of the root helper; its JSON answer. Raises OSError when it fails."""
    done = subprocess.run(
        [*helper_argv(helper), *args],
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise OSError(f"{helper} {args[0]}: {done.stderr.strip() or done.returncode}")
    return json.loads(done.stdout or "{}")


def file_sha256(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return ""


def launch(workdir: Path, request: Mapping[str, Any]) -> Handle:
    """The `launch` op (see the module's docstring)."""
    user, helper = request.get("user"), request.get("helper")
    if bool(user) != bool(helper):
        raise ValueError("hostctl launch: `user` and `helper` go together")
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with locked(workdir / LOCK_FILE):
        existing = read_handle(workdir)
        if existing is not None:
            return existing
        bundle = str(request["bundle"])
        wanted = request.get("sha256")
        if wanted and file_sha256(bundle) != wanted:
            raise OSError(f"the runner bundle {bundle} is not the control plane's (sha256)")
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
        for name in request.get("inherit") or []:
            if name in os.environ and name not in env:
                env[name] = os.environ[name]
        run = workdir / RUN_DIR if user else workdir
        run.mkdir(exist_ok=True, mode=0o700)
        token_file = write_token(run, str(request["token"]))
        env[ENV_RUNNER_TOKEN_FILE] = str(token_file)
        python = str(request.get("python") or sys.executable)
        # The runner runs the bytes just checked, whatever happens to the file meanwhile.
        argv = verified_argv(python, bundle, wanted) if wanted else [python, bundle]
        try:
            if user:
                argv = _as_attempt_user(workdir, run, str(user), str(helper), env, argv)
            handle = spawn_runner(argv, workdir, env, request.get("markers") or [])
        except OSError:
            token_file.unlink(missing_ok=True)  # no runner will read it
            raise
        if user:
            handle.update(user=str(user), helper=str(helper), run=str(run))
        write_json(workdir / HANDLE_FILE, handle)
        return handle


def _as_attempt_user(
    workdir: Path, run: Path, user: str, helper: str, env: dict[str, str], argv: list[str]
) -> list[str]:
    """Create the attempt's user, hand it `run`, and return the argv that starts `argv` as
    it (the environment in the argv: sudo would reset it)."""
    workdir.chmod(0o711)  # the attempt user passes through; only `run` is its own
    env.update(HOME=str(run), USER=user, LOGNAME=user)
    call_helper(helper, "add", user)
    call_helper(helper, "own", user, str(run))
    assignments = [f"{name}={value}" for name, value in env.items()]
    return [*helper_argv(helper), "exec", user, "/usr/bin/env", "-i", *assignments, *argv]


def terminate(handle: Handle, grace_s: float) -> bool:
    """The `terminate` op: a detached reaper for the attempt; True when one was started."""
    if not handle.get("user"):
        return start_reaper(sys.executable, handle, grace_s)
    helper = " ".join(shlex.quote(part) for part in helper_argv(str(handle["helper"])))
    user = shlex.quote(str(handle["user"]))
    later = (
        f"{helper} kill {user} TERM >/dev/null 2>&1; sleep {max(0.0, grace_s):g}; "
        f"{helper} kill {user} KILL >/dev/null 2>&1"
    )
    subprocess.Popen(
        ["sh", "-c", later],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return True


def release(handle: Handle) -> dict[str, Any]:
    """The `release` op: nothing of the attempt is left, processes or files."""
    workdir = Path(str(handle["workdir"]))
    if handle.get("user"):
        call_helper(str(handle["helper"]), "remove", str(handle["user"]), str(handle["run"]))
    elif handle.get("pgid") is not None:
        kill_leftovers(handle)
    shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.suppress(OSError):
        workdir.parent.rmdir()  # the job's directory, once its last attempt is gone
    return {"released": True, "wiped": not workdir.exists()}


def poll(workdir: Path) -> dict[str, Any]:
    """The `poll` op: what became of the runner launched in `workdir`."""
    handle = read_handle(workdir)
    if handle is None:
        return {"state": "lost", "detail": f"no runner was launched in {workdir}"}
    return state_of(handle)


def poll_many(items: Sequence[Any]) -> list[dict[str, Any]]:
    """The `poll-many` op: for each handle (the control plane's record) what became of its
    runner, or for each work directory `poll` of it; in order. One that fails answers
    `{"error": message}` and the others are still answered."""
    results: list[dict[str, Any]] = []
    for item in items:
        try:
            results.append(state_of(item) if isinstance(item, dict) else poll(Path(str(item))))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}"})
    return results


def _op(op: str, args: list[str]) -> dict[str, Any]:
    if op == "launch" and len(args) == 1:
        return launch(Path(args[0]), json.load(sys.stdin))
    if op == "poll" and len(args) == 1:
        return poll(Path(args[0]))
    if op == "poll" and not args:
        return state_of(json.load(sys.stdin))
    if op == "poll-many" and not args:
        request = json.load(sys.stdin)
        items = None
        if isinstance(request, dict):
            items = request.get("handles", request.get("workdirs"))
        if not isinstance(items, list):
            raise ValueError('hostctl poll-many reads {"handles": [...]} on stdin')
        return {"results": poll_many(items)}
    if op == "terminate" and len(args) == 1:
        return {"reaper": terminate(json.load(sys.stdin), float(args[0]))}
    if op == "release" and not args:
        return release(json.load(sys.stdin))
    if op == "diagnostics" and len(args) == 1:
        return {"lines": log_tail(Path(args[0]))}
    if op == "capacity" and not args:
        return {"gpus": gpu_count()}
    if op == "reap" and len(args) >= 4:
        procfs._main(args)
        return {}
    raise ValueError(
        f"usage: hostctl launch|poll|diagnostics WORKDIR | poll|terminate GRACE|release "
        f"< handle.json | poll-many < handles.json, "
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
