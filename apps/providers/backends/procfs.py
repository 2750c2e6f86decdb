"""Process facts from /proc (Linux). Zombies count as gone: on hosts whose PID 1 does not
reap orphans, a finished runner stays a zombie, and `kill(pid, 0)` would call it alive."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgid: int
    start_ticks: int


def stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(pid=pid, state=fields[0], pgid=int(fields[2]), start_ticks=int(fields[19]))


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
