"""A real OpenSSH server on loopback for the SSH provider's tests: its own host key, client
key, authorized_keys and sshd_config in a temporary directory, on a free port. The tests run
as root, so the SSH user is root and the far host is this machine."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from runner import procfs
from tests.live import free_port

SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 15


@dataclass
class Sshd:
    """One sshd: `host_key` is its known_hosts key (`ssh-ed25519 AAAA...`), `private_key`
    the client key it accepts for `user`."""

    directory: Path
    port: int
    user: str
    host_key: str
    private_key: str
    process: subprocess.Popen | None = None

    host = "127.0.0.1"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.directory / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=open(self.directory / "sshd.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "sshd.log").read_text(errors="replace")
                raise RuntimeError(f"sshd did not start on port {self.port}:\n{log}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        """Whether sshd accepts a connection and sends its banner."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as connection:
                return connection.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the listener and every connection it serves, as a host whose sshd crashed
        would: the detached runners started through it (no longer its descendants) stay."""
        if self.process is None:
            return
        children = _descendants(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=10)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process = None


def _descendants(root: int) -> list[int]:
    """The live processes below `root`: sshd's per-connection processes and their shells.
    A detached runner is not one: its launcher exited, so it was handed to PID 1."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    raw = handle.read()
                parents[int(entry)] = int(raw[raw.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                frontier.append(pid)
                if procfs.alive(pid):
                    found.append(pid)
    return found


def keygen(path: Path) -> tuple[str, str]:
    """A new ed25519 key at `path`: (its private key text, its public key line)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainyard-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.read_text(), path.with_suffix(".pub").read_text().strip()


def make_sshd(directory: Path) -> Sshd:
    """An sshd set up in `directory` (not started)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    _, host_public = keygen(directory / "host_key")
    client_private, client_public = keygen(directory / "client_key")
    (directory / "authorized_keys").write_text(client_public + "\n")
    port = free_port()
    config = f"""\
ListenAddress 127.0.0.1
Port {port}
HostKey {directory / "host_key"}
PidFile {directory / "sshd.pid"}
AuthorizedKeysFile {directory / "authorized_keys"}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PrintMotd no
LogLevel ERROR
"""
    (directory / "sshd_config").write_text(config)
    user = pwd.getpwuid(os.getuid()).pw_name
    host_key = " ".join(host_public.split()[:2])
    return Sshd(directory, port, user, host_key, client_private)
