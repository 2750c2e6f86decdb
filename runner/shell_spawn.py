"""Starting a shell session's process in the workload's environment (`runner.shell`): which
shell, which SFTP server, and the process itself, on pipes or on a terminal of its own.

Every process is the leader of a new session (`start_new_session`), so its group and
session can be signalled and killed as one without touching the runner's group; it still
carries the workload's environment, markers included, so `kill_leftovers` finds it too.
A terminal's child needs the terminal as its controlling one, and every child its signals
at their defaults: a `preexec_fn` is unsafe in a threaded program, so a tiny Python
trampoline does both (TIOCSCTTY for a terminal) and execs the shell.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping
from pathlib import Path

SYSTEM_SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/libexec/sftp-server",
    "/usr/lib/sftp-server",
)
# argv: [python, -I, -S, -c, TRAMPOLINE, "pty" | "pipes", path, argv0, args...]
# A session's process starts with every signal at its default, as under sshd, whatever the
# runner inherited (under `nohup` SIGHUP is ignored, and an ignored signal stays ignored
# across exec: a closed session's SIGHUP would then leave it to the SIGKILL).
TRAMPOLINE = (
    "import fcntl,os,signal,sys,termios\n"
    "if sys.argv[1] == 'pty':\n"
    "    fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "for name in ('SIGHUP','SIGINT','SIGQUIT','SIGTERM','SIGPIPE','SIGXFSZ','SIGTTIN','SIGTTOU'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "try:\n"
    "    os.execve(sys.argv[2], sys.argv[3:], os.environ)\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'{sys.argv[2]}: {exc.strerror}\\r\\n')\n"
    "    os._exit(127)\n"
)
_PACKAGE_DIR = Path(__file__).resolve().parent


def _nothing(signum: int, frame: object) -> None:
    pass


def unignore_sighup() -> None:
    """Main thread only. A SIGHUP this process ignores (started under `nohup`) becomes a
    handler that does nothing: the same for this process, but exec resets a handler to the
    default, while an ignored signal stays ignored. A session's process then dies of the
    SIGHUP that closes it from its first instant (the trampoline resets it too, but only
    once it runs)."""
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _nothing)


def client_env(requested: Mapping[str, object], term: str | None) -> dict[str, str]:
    """What of a client's `env` a session takes: LANG, LC_* and TERM, strings only; the
    terminal request's TERM wins."""
    env = {
        key: value
        for key, value in requested.items()
        if isinstance(key, str)
        and isinstance(value, str)
        and (key in ("LANG", "TERM") or key.startswith("LC_"))
        and "\0" not in key + value
        and "=" not in key
    }
    if term:
        env["TERM"] = term
    return env


def login_shell(env: Mapping[str, str]) -> str | None:
    """$SHELL when it is set and executable, else /bin/bash, else /bin/sh; None when none."""
    candidates = [env.get("SHELL", ""), "/bin/bash", "/bin/sh"]
    for path in candidates:
        if path and os.path.isabs(path) and os.access(path, os.X_OK) and os.path.isfile(path):
            return path
    return None


def shell_argv(shell: str, command: str | None) -> tuple[str, list[str]]:
    """(executable, argv) running `command` with `shell`, or `shell` as a login shell."""
    name = os.path.basename(shell)
    if command is None:
        return shell, ["-" + name]  # a leading "-" in argv[0]: a login shell
    return shell, [name, "-c", command]


def sftp_argv(env: Mapping[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """(executable, argv, env) of an SFTP server on stdin/stdout: the image's own, else
    `runner.sftp_server`, started the way the runner was (source tree or zipapp bundle)."""
    for path in SYSTEM_SFTP_SERVERS:
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path, [path], dict(env)
    python = sys.executable or "python3"
    container = _PACKAGE_DIR.parent
    if container.is_file():  # runner/ lives in the zipapp bundle
        return python, [python, str(container), "sftp_server"], dict(env)
    env = dict(env)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(container) + (os.pathsep + path if path else "")
    return python, [python, "-m", "runner.sftp_server"], env


def spawn_piped(
    executable: str, argv: list[str], env: Mapping[str, str], cwd: str
) -> subprocess.Popen:
    """The process with its stdin, stdout and stderr on pipes. Raises OSError."""
    python = sys.executable or "python3"
    return subprocess.Popen(
        [python, "-I", "-S", "-c", TRAMPOLINE, "pipes", executable, *argv],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        start_new_session=True,
        bufsize=0,
    )


def spawn_pty(
    executable: str, argv: list[str], env: Mapping[str, str], cwd: str, cols: int, rows: int
) -> tuple[subprocess.Popen, int]:
    """The process on a new terminal of `cols` x `rows` that is its controlling terminal;
    (process, the terminal's master fd). Raises OSError."""
    master, slave = pty.openpty()
    try:
        set_window(master, cols, rows)
        python = sys.executable or "python3"
        proc = subprocess.Popen(
            [python, "-I", "-S", "-c", TRAMPOLINE, "pty", executable, *argv],
            cwd=cwd,
            env=dict(env),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
            start_new_session=True,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return proc, master


def set_window(fd: int, cols: int, rows: int) -> None:
    """Set the terminal's size (the kernel tells its foreground group: SIGWINCH)."""
    cols = max(0, min(int(cols), 0xFFFF))
    rows = max(0, min(int(rows), 0xFFFF))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
