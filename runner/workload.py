"""The workload as a process: its argv and environment from the spec, starting it in the
runner's process group, killing what it leaves (`kill_leftovers`), and `{workdir}/exit.json`."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner import procfs
from runner.config import WORKLOAD_HIDDEN_VARS
from runner.output import utc_now_iso
from runner.protocol import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_DIR,
    ENV_EXIT_MESSAGE_FILE,
    ENV_JOB_ID,
    EXIT_CANNOT_EXECUTE,
    EXIT_NOT_FOUND,
)
from runner.spec import JobSpec, SpecError

# kill_leftovers: rounds of SIGKILL (a process forking meanwhile adds members).
KILL_ROUNDS = 20
KILL_ROUND_PAUSE_S = 0.02


def exit_code_of(returncode: int) -> int:
    """The reported exit code: a signal-killed workload (negative returncode) is 128 + sig."""
    return 128 - returncode if returncode < 0 else returncode


def workload_argv(spec: JobSpec, workdir: Path) -> list[str]:
    """The workload's argv; writes `{workdir}/script.sh` for a script job."""
    has_command = spec.command is not None
    has_script = spec.script_b64 is not None
    if has_command == has_script:
        raise SpecError("the spec must set exactly one of command and script_b64")
    if has_command:
        command = spec.command
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
            raise SpecError("command must be a non-empty list of strings")
        return list(command)
    try:
        script = base64.b64decode(str(spec.script_b64), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(f"script_b64 is not base64: {exc}") from exc
    path = workdir / "script.sh"
    path.write_bytes(script)
    path.chmod(0o700)
    return ["bash", str(path)]


def workload_env(spec: JobSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment minus the runner's own variables, plus the spec's env."""
    source = os.environ if base is None else base
    env = {key: value for key, value in source.items() if key not in WORKLOAD_HIDDEN_VARS}
    env.update(spec.env)
    return env


def prepare(spec: JobSpec, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The workload's argv and environment; creates its working directory `{workdir}/work`
    and, inside it, the checkpoint directory. Raises SpecError or OSError."""
    argv = workload_argv(spec, workdir)
    work = workdir / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = workload_env(spec)
    checkpoint_dir = env.get(ENV_CHECKPOINT_DIR, "")
    if checkpoint_dir:
        (work / checkpoint_dir).mkdir(parents=True, exist_ok=True)
    return argv, env


def spawn(argv: list[str], work: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start the workload in `work` with its stdout and stderr piped. Raises OSError."""
    # No new session: the workload shares the runner's process group, so a signal to the
    # group reaches the runner and everything the workload starts.
    return subprocess.Popen(
        argv,
        cwd=str(work),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
    )


def workload_markers(env: Mapping[str, str]) -> list[str]:
    """The `NAME=value` entries of the workload's environment that only this attempt's
    processes carry (its job id and attempt number); [] when either is missing."""
    if not env.get(ENV_JOB_ID) or not env.get(ENV_ATTEMPT):
        return []
    return [f"{ENV_JOB_ID}={env[ENV_JOB_ID]}", f"{ENV_ATTEMPT}={env[ENV_ATTEMPT]}"]


def _ancestors() -> set[int]:
    """This process and the ones above it (never signalled: whoever started the runner)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        info = procfs.stat(pid)
        if info is None:
            break
        pid = info.ppid
    return found


def leftovers(markers: Sequence[str]) -> list[int]:
    """The workload's live processes: every other member of the runner's process group,
    and any process carrying every one of `markers` that left the group (setsid); never the
    runner or its ancestors."""
    spared, group = _ancestors(), os.getpgrp()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        info = procfs.stat(int(entry))
        if info is None or info.state in {"Z", "X"}:
            continue
        if info.pgid == group or (markers and procfs.environ_has(info.pid, markers)):
            found.append(info.pid)
    return found


def kill_leftovers(markers: Sequence[str]) -> None:
    """SIGKILL every process `leftovers` finds, round after round until none is left (a
    bounded number of rounds). The runner's own kill reaches the workload's whole tree:
    orphans of a killed parent are not Slurm's to kill (proctrack/linuxproc)."""
    for _ in range(KILL_ROUNDS):
        targets = leftovers(markers)
        if not targets:
            return
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(KILL_ROUND_PAUSE_S)


def start_failure_code(exc: OSError) -> int:
    """The exit code reported for a workload that could not be started."""
    return EXIT_CANNOT_EXECUTE if isinstance(exc, PermissionError) else EXIT_NOT_FOUND


def write_exit_json(workdir: Path, exit_code: int) -> None:
    """Write `{workdir}/exit.json` atomically (and the exit message file, when the backend
    named one: `write_exit_message`)."""
    record = json.dumps({"exit_code": exit_code, "finished_at": utc_now_iso()}) + "\n"
    path = workdir / "exit.json"
    tmp = path.with_name("exit.json.tmp")
    tmp.write_text(record)
    os.replace(tmp, path)
    write_exit_message(record)


def write_exit_message(record: str) -> None:
    """Write `record` (one JSON line) to the file TRAINYARD_EXIT_MESSAGE_FILE names, whole,
    replacing what was there; nothing when it names none. A file that cannot be written is
    no reason to fail the runner: the backend then reads the attempt as lost."""
    path = os.environ.get(ENV_EXIT_MESSAGE_FILE, "").strip()
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as handle:
        handle.write(record)
