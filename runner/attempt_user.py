#!/usr/bin/python3
"""trainyard-attempt-user: the small root helper that gives each attempt on a remote host a
Unix user of its own (ssh and slurm providers with config `isolation: users`; on Slurm the
user must exist on the compute node too, so as shipped it serves clusters whose login node
is the compute node). The operator installs
this one file, root-owned, and lets the provider's SSH user run it through sudo:

    install -o root -g root -m 0755 runner/attempt_user.py /usr/local/sbin/trainyard-attempt-user
    # /etc/sudoers.d/trainyard (visudo -f): the SSH user `trainyard` may run it, nothing else
    trainyard ALL=(root) NOPASSWD: /usr/local/sbin/trainyard-attempt-user

Standard library only, self-contained (it never imports the runner bundle, which its caller
owns). It acts only on users it created itself (name `ty-…`, comment ATTEMPT_COMMENT, uid
not 0) and on directories named `attempt-<n>/run`, so sudo to it is not sudo to anything.

Ops (each prints one JSON object; exit 2 on a refused argument):
- `add NAME`: create the system user NAME (own group, no home, no login shell), or answer
  the existing one; `{"uid", "gid"}`.
- `own NAME DIR`: DIR and everything in it (no symlink followed) become NAME's, with the
  caller's group; directories 02750.
- `exec NAME ARGV...`: become NAME (no supplementary groups, umask 027) and exec ARGV.
- `kill NAME SIGNAL`: send SIGNAL (TERM, KILL) to every process of NAME's uid; with KILL,
  until none is left. A per-attempt uid makes "the attempt's processes" exact.
- `remove NAME DIR`: KILL every process of NAME, delete DIR, delete the user and its group.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time

ATTEMPT_COMMENT = "trainyard attempt"
NAME_RE = re.compile(r"^ty-[a-z0-9]{4,28}$")
DIR_RE = re.compile(r"/attempt-[0-9]+/run$")
SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}
KILL_DEADLINE_S = 10.0


class Refused(Exception):
    pass


def _attempt_user(name: str) -> pwd.struct_passwd:
    """NAME's passwd entry; Refused unless it is an attempt user this helper created."""
    if not NAME_RE.match(name):
        raise Refused(f"not an attempt user name: {name!r}")
    try:
        entry = pwd.getpwnam(name)
    except KeyError as exc:
        raise Refused(f"no user {name}") from exc
    if entry.pw_uid == 0 or entry.pw_gecos != ATTEMPT_COMMENT:
        raise Refused(f"{name} is not a trainyard attempt user")
    return entry


def _attempt_dir(path: str) -> str:
    """PATH when it is an absolute `…/attempt-<n>/run` directory and no symlink."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or not DIR_RE.search(path):
        raise Refused(f"not an attempt run directory: {path!r}")
    if os.path.islink(path):
        raise Refused(f"{path} is a symlink")
    return path


def add(name: str) -> dict:
    if not NAME_RE.match(name):
        raise Refused(f"not an attempt user name: {name!r}")
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
             "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment", ATTEMPT_COMMENT,
             name],
            check=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    entry = _attempt_user(name)
    return {"uid": entry.pw_uid, "gid": entry.pw_gid}


def own(name: str, path: str) -> dict:
    """PATH and all in it become NAME's, group: the caller's (sudo's SUDO_GID), so the SSH
    user still reads the runner's exit record; directories 02750 (setgid: the group stays
    on what the attempt creates), nothing for other users."""
    entry, path = _attempt_user(name), _attempt_dir(path)
    if not os.path.isdir(path):
        raise Refused(f"{path} is not a directory")
    gid = int(os.environ.get("SUDO_GID") or os.getgid())
    for root, dirs, files in os.walk(path):
        for item in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(item, entry.pw_uid, gid, follow_symlinks=False)
        for directory in [root, *(os.path.join(root, n) for n in dirs)]:
            if not os.path.islink(directory):
                os.chmod(directory, 0o2750)
    return {"owned": path}


def _pids_of(uid: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(int(pid))
        except OSError:
            continue
    return found


def _signal_all(uid: int, gid: int, signum: int) -> None:
    """kill(-1) from a child that has become `uid`: every process of that uid at once (a
    fork bomb cannot outrun it as it can a walk of /proc)."""
    child = os.fork()
    if child == 0:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.kill(-1, signum)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def kill(name: str, signame: str) -> dict:
    entry = _attempt_user(name)
    if signame not in SIGNALS:
        raise Refused(f"signal {signame!r}: TERM or KILL")
    _signal_all(entry.pw_uid, entry.pw_gid, SIGNALS[signame])
    deadline = time.monotonic() + KILL_DEADLINE_S
    while signame == "KILL" and _pids_of(entry.pw_uid) and time.monotonic() < deadline:
        time.sleep(0.05)
        _signal_all(entry.pw_uid, entry.pw_gid, signal.SIGKILL)
    return {"left": len(_pids_of(entry.pw_uid))}


def remove(name: str, path: str) -> dict:
    path = _attempt_dir(path)
    try:
        _attempt_user(name)
    except Refused:
        if NAME_RE.match(name) and not _exists(name):
            shutil.rmtree(path, ignore_errors=True)
            return {"removed": name, "user": False}  # a second release: nothing left
        raise
    left = kill(name, "KILL")["left"]
    shutil.rmtree(path, ignore_errors=True)
    if left:
        raise Refused(f"{left} process(es) of {name} would not die; the user stays")
    subprocess.run(["userdel", name], check=True, stdin=subprocess.DEVNULL)
    return {"removed": name, "user": True}


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def run_as(name: str, argv: list[str]) -> None:
    entry = _attempt_user(name)
    if not argv:
        raise Refused("exec: no command")
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.umask(0o027)  # what the attempt writes: its own and the SSH user's group, no one else
    os.execv(argv[0], argv)


def main(argv: list[str]) -> int:
    op, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if op == "exec" and len(args) >= 2:
            run_as(args[0], args[1:])
        elif op == "add" and len(args) == 1:
            answer = add(args[0])
        elif op == "own" and len(args) == 2:
            answer = own(*args)
        elif op == "kill" and len(args) == 2:
            answer = kill(*args)
        elif op == "remove" and len(args) == 2:
            answer = remove(*args)
        else:
            raise Refused("usage: add NAME | own NAME DIR | exec NAME ARGV... | kill NAME "
                          "TERM|KILL | remove NAME DIR")  # fmt: skip
    except Refused as exc:
        print(f"trainyard-attempt-user: {exc}", file=sys.stderr)
        return 2
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"trainyard-attempt-user {op}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
