"""Holding a fine-tune's trainer still, so that a preemption is certain to find it mid-run
whatever the machine's speed, without training hundreds of steps to make that likely.

`hold_at_checkpoint` stops the job's trainer (SIGSTOP) as it saves a checkpoint; the
preemption then proceeds as it would against a slow trainer: the runner (or Slurm) signals
the workload, and the signal waits, pending, on the stopped process. `release_when_signalled`
lets it go (SIGCONT) the moment SIGTERM is pending, so the trainer handles its stop order at
the step it was held at, as it would have without the hold. A trainer killed outright is
simply gone."""

from __future__ import annotations

import contextlib
import os
import signal

from runner import procfs
from runner.protocol import ENV_ATTEMPT, ENV_CHECKPOINT_DIR, ENV_JOB_ID
from tests.integration.stack import wait_for
from tests.live import read_or_empty as _read

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def trainer_pids(job_id: str, attempt: int) -> list[int]:
    """The processes running `python -m trainer` for this job's attempt."""
    markers = [f"{ENV_JOB_ID}={job_id}", f"{ENV_ATTEMPT}={attempt}"]
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and b"-m\0trainer\0" in _read(f"/proc/{entry}/cmdline")
        and procfs.environ_has(int(entry), markers)
    ]


def _checkpoint_dir(pid: int) -> str | None:
    entries = _read(f"/proc/{pid}/environ").split(b"\0")
    prefix = f"{ENV_CHECKPOINT_DIR}=".encode()
    named = [entry.removeprefix(prefix) for entry in entries if entry.startswith(prefix)]
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    # Through the process's own root: a trainer in a container (a pod) names paths of its
    # mount namespace; for a process of this host the root is "/".
    return os.path.join(f"/proc/{pid}/root{cwd}", named[0].decode() if named else "output")


def _reached(pid: int, step: int) -> bool:
    directory = _checkpoint_dir(pid)
    try:
        names = os.listdir(directory) if directory else []
    except OSError:
        return False
    return any(
        name.startswith("checkpoint-") and name[11:].isdigit() and int(name[11:]) >= step
        for name in names
    )


def hold_at_checkpoint(job_id: str, step: int, attempt: int = 1, timeout: float = 240) -> list[int]:
    """Stop the attempt's trainer the moment it starts writing a checkpoint at `step` or
    later (the save completes, and is uploaded, once it is let go); its pids."""
    pids = wait_for(lambda: trainer_pids(job_id, attempt), timeout, what="the trainer")
    wait_for(
        lambda: any(_reached(pid, step) for pid in pids),
        timeout,
        what=f"a step-{step} checkpoint being written",
        interval=0.01,
    )
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    return pids


def _term_pending(pid: int) -> bool:
    for line in _read(f"/proc/{pid}/status").decode().splitlines():
        if line.startswith(("ShdPnd:", "SigPnd:")) and int(line.split()[1], 16) & SIGTERM_BIT:
            return True
    return False


def release_when_signalled(pids: list[int], timeout: float = 60) -> None:
    """Once SIGTERM waits on a held trainer (or it was killed), let every one go on."""
    try:
        wait_for(
            lambda: any(_term_pending(pid) or not procfs.alive(pid) for pid in pids),
            timeout,
            what="the stop signal to reach the held trainer",
        )
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
