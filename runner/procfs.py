"""Process facts from /proc (Linux), and signalling a process group only while it is still the
one a handle recorded. Zombies count as gone: on hosts whose PID 1 does not reap orphans, a
finished runner stays a zombie, and `kill(pid, 0)` would call it alive.

**Which group is ours.** A process number is reused once its process is gone, and with it a
process group id, so a recorded pgid alone may name some other group by the time it is
signalled. `group_targets` decides what may be signalled, right before the signal:

- the whole group, while its leader (the process numbered pgid, a zombie included) is the
  recorded one: same start time (`start_ticks`, from /proc/<pid>/stat). Linux does not hand
  a number out again while any process still has it as its group, so while the recorded
  leader holds the number, every member is of its group;
- nothing, when the process numbered pgid is another one (the number was reused: the
  recorded group is long gone);
- when the leader has exited and been reaped, only the members whose environment carries
  every marker (`NAME=value` entries that only the attempt's workload has, e.g.
  `TRAINYARD_JOB_ID` and `TRAINYARD_ATTEMPT`), one by one; nothing without markers.

Standard library only: run as a script (`reaper_argv`), this module is the detached reaper
that SIGTERMs a group and SIGKILLs what is left after a grace period, checking before each
signal.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

GROUP = "group"  # group_targets: the whole process group may be signalled
REAPER_POLL_S = 0.1


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgid: int
    start_ticks: int
    ppid: int = 0
    session: int = 0


def stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(
        pid=pid,
        state=fields[0],
        pgid=int(fields[2]),
        start_ticks=int(fields[19]),
        ppid=int(fields[1]),
        session=int(fields[3]),
    )


def alive(pid: int, start_ticks: int | None = None) -> bool:
    """True when `pid` runs and is not a zombie; with `start_ticks`, also that it is the same
    process (not a reused pid)."""
    info = stat(pid)
    if info is None or info.state in {"Z", "X"}:
        return False
    return start_ticks is None or info.start_ticks == start_ticks


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = stat(int(entry))
            if info is not None and info.pgid == pgid and info.state not in {"Z", "X"}:
                members.append(info.pid)
    return members


def environ_has(pid: int, markers: Sequence[str]) -> bool:
    """True when every `NAME=value` of `markers` is an entry of the process's environment
    (False when it cannot be read: another user's process, or gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = set(handle.read().split(b"\0"))
    except OSError:
        return False
    return bool(markers) and all(marker.encode() in entries for marker in markers)


def group_targets(
    pgid: int, leader_pid: int, start_ticks: int | None, markers: Sequence[str] = ()
) -> str | list[int]:
    """What of process group `pgid` may be signalled as the group that `leader_pid`, started
    at `start_ticks`, led: GROUP, or the pids of the members to signal one by one (maybe
    none). See the module's docstring."""
    if pgid <= 1 or leader_pid != pgid:
        return []
    leader = stat(pgid)
    if leader is not None:
        if start_ticks is not None and (leader.start_ticks, leader.pgid) == (start_ticks, pgid):
            return GROUP
        return []
    if not markers:
        return []
    return [pid for pid in group_members(pgid) if environ_has(pid, markers)]


def signal_group(
    pgid: int, leader_pid: int, start_ticks: int | None, markers: Sequence[str], signum: int
) -> bool:
    """Send `signum` to what `group_targets` allows; True when anything was signalled."""
    targets = group_targets(pgid, leader_pid, start_ticks, markers)
    if targets == GROUP:
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return False
        return True
    sent = False
    for pid in targets:
        try:
            os.kill(pid, signum)
            sent = True
        except ProcessLookupError:
            pass
    return sent


def reap(
    pgid: int, leader_pid: int, start_ticks: int | None, markers: Sequence[str], grace_s: float
) -> None:
    """SIGTERM the group, wait up to `grace_s` for it to empty (zombies do not count), then
    SIGKILL what is left: each signal only to what `group_targets` allows at that moment."""
    if not signal_group(pgid, leader_pid, start_ticks, markers, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(REAPER_POLL_S)
    if group_members(pgid):
        signal_group(pgid, leader_pid, start_ticks, markers, signal.SIGKILL)


def reaper_argv(
    python: str,
    pgid: int,
    leader_pid: int,
    start_ticks: int | None,
    markers: Sequence[str],
    grace_s: float,
) -> list[str]:
    """The command line of a detached `reap`: this file run as a script, isolated (`-I`: no
    environment variables, no script directory on the path)."""
    ticks = "" if start_ticks is None else str(start_ticks)
    path = os.path.abspath(__file__)
    return [python, "-I", path, str(pgid), str(leader_pid), ticks, str(grace_s), *markers]


def _main(argv: list[str]) -> None:
    pgid, leader_pid, ticks, grace, *markers = argv
    reap(int(pgid), int(leader_pid), int(ticks) if ticks else None, markers, float(grace))


if __name__ == "__main__":
    _main(sys.argv[1:])
