"""`manage.py healthcheck web|worker|beat`: exit 0 when that process is healthy.

Used by docker-compose healthchecks: web answers /healthz; a worker answers a Celery ping
addressed to it; beat's pid file names a live process.
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
        parser.add_argument("process", choices=["web", "worker", "beat"])
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
        else:
            try:
                os.kill(int(Path(pidfile).read_text().strip()), 0)
            except (OSError, ValueError) as exc:
                raise CommandError(f"beat is not running: {exc}") from exc
        self.stdout.write("ok")
