"""`manage.py healthcheck web|worker|beat|ssh`: exit 0 when that process is healthy.

Used by docker-compose healthchecks: web answers /healthz; a worker answers a Celery ping
addressed to it; beat's pid file names a live process; the SSH gateway greets a connection
on SSH_GATEWAY_PORT with its SSH version line.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path

from celery import current_app as app  # the project's app: config/__init__.py loads it
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Check the health of one Trainyard process."

    def add_arguments(self, parser) -> None:
        parser.add_argument("process", choices=["web", "worker", "beat", "ssh"])
        parser.add_argument("--url", default=f"{settings.WEB_URL}/healthz")
        parser.add_argument("--pidfile", default="/tmp/celerybeat.pid")

    def handle(self, *args, process: str, url: str, pidfile: str, **options) -> None:
        if process == "web":
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status != 200:
                    raise CommandError(f"{url} answered {response.status}")
        elif process == "worker":
            replies = app.control.ping(destination=[f"celery@{socket.gethostname()}"], timeout=3)
            if not replies:
                raise CommandError("the worker did not answer a ping")
        elif process == "ssh":
            address = ("127.0.0.1", settings.SSH_GATEWAY_PORT)
            with socket.create_connection(address, timeout=5) as conn:
                greeting = conn.recv(64)
            if not greeting.startswith(b"SSH-2.0-"):
                raise CommandError(f"port {address[1]} did not answer as an SSH server")
        else:
            try:
                os.kill(int(Path(pidfile).read_text().strip()), 0)
            except (OSError, ValueError) as exc:
                raise CommandError(f"beat is not running: {exc}") from exc
        self.stdout.write("ok")
