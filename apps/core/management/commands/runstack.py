"""`manage.py runstack [NAME ...]`: run the Procfile's processes (web, worker, beat) for
`make run`, and make sure they never outlive it.

A Procfile runner that starts each process in a session of its own (honcho does) leaves
them behind when `make run` is killed hard (a closed terminal, a supervisor's SIGKILL): all
three run on and hold the port. Here every process stays in this command's process group (a
signal to the group reaches them all) and asks the kernel for SIGTERM when this command dies
(`PR_SET_PDEATHSIG`, which survives the `exec` of the process's command). Ctrl-C or SIGTERM
stops them all, SIGKILL after a grace period; when one of them exits, the others stop too.

Before anything starts, the web port is checked: a port that is taken is a clear error
naming it, rather than a stack whose web process dies while its worker and beat run on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

PR_SET_PDEATHSIG = 1
GATEWAY = "ssh"  # the Procfile's SSH gateway, started only where SSH_GATEWAY_PORT is set
STOP_GRACE_S = 10.0


def parse_procfile(text: str) -> dict[str, str]:
    """`name: command` lines, in order; blank lines and `#` comments are skipped."""
    processes = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, command = line.partition(":")
        if not sep or not name.strip() or not command.strip():
            raise CommandError(f"Not a Procfile line: {line!r}")
        processes[name.strip()] = command.strip()
    return processes


def port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _check_web_port() -> None:
    host, port = settings.WEB_HOST, settings.WEB_PORT
    if port_taken(host, port):
        raise CommandError(
            f"Port {port} on {host} is already in use (another Trainyard, or another server): "
            "stop it, or choose another port with WEB_PORT=."
        )


def _check_gateway_port() -> None:
    host, port = settings.SSH_GATEWAY_BIND, settings.SSH_GATEWAY_PORT
    if port_taken(host, port):
        raise CommandError(
            f"Port {port} on {host} is already in use: the SSH gateway into jobs cannot "
            "listen there. Stop what holds it, or choose another port with SSH_GATEWAY_PORT= "
            "(0 turns the gateway off)."
        )


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


class Command(BaseCommand):
    help = "Run the Procfile's processes in this process group; they die with it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("names", nargs="*", help="Which processes (default: all).")
        parser.add_argument("-f", "--procfile", default=str(settings.BASE_DIR / "Procfile"))
        parser.add_argument(
            "--check-port", action="store_true", help="Only check that the web port is free."
        )

    def handle(self, *args, names: list[str], procfile: str, check_port: bool, **options) -> None:
        if check_port:
            _check_web_port()
            if settings.SSH_GATEWAY_PORT:
                _check_gateway_port()
            return
        processes = parse_procfile(Path(procfile).read_text())
        unknown = sorted(set(names) - set(processes))
        if unknown:
            raise CommandError(f"No such process in {procfile}: {', '.join(unknown)}")
        chosen = {name: processes[name] for name in names or processes}
        if GATEWAY in chosen and not settings.SSH_GATEWAY_PORT and GATEWAY not in names:
            del chosen[GATEWAY]  # off unless configured: nothing would listen
            self.stdout.write("No SSH gateway into jobs (SSH_GATEWAY_PORT is not set).")
        if "web" in chosen:
            _check_web_port()
        if GATEWAY in chosen:
            _check_gateway_port()
        sys.exit(self._run(chosen))

    def _run(self, chosen: dict[str, str]) -> int:
        stopping = threading.Event()
        children: dict[str, subprocess.Popen] = {}
        width = max(len(name) for name in chosen)

        def stop(signum: int = signal.SIGTERM, frame: object = None) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        for name, command in chosen.items():
            child = subprocess.Popen(
                ["/bin/sh", "-c", f"exec {command}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            children[name] = child
            threading.Thread(
                target=self._relay, args=(name.ljust(width), child), daemon=True
            ).start()
            self.stdout.write(f"{_now()} {name.ljust(width)} | started (pid {child.pid})")
        ended: list[str] = []
        while not stopping.is_set() and not ended:
            ended = [name for name, child in children.items() if child.poll() is not None]
            stopping.wait(0.2)
        if ended:
            code = children[ended[0]].returncode
            self.stdout.write(f"{_now()} {ended[0]} exited with {code}: stopping the others")
        self._stop(children)
        return 0 if not ended else (children[ended[0]].returncode or 1)

    def _relay(self, label: str, child: subprocess.Popen) -> None:
        for raw in child.stdout:
            self.stdout.write(f"{_now()} {label} | {raw.decode(errors='replace').rstrip()}")

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        for child in children.values():
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children.values():
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _now() -> str:
    return time.strftime("%H:%M:%S")
