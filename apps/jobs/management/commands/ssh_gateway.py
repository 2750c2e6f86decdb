"""`manage.py ssh_gateway [--bind ADDR] [--port N]`: the SSH gateway into running jobs
(docs/ssh.md). The Procfile's `ssh` process; `make run` starts it on port 2222."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.jobs.gateway.server import run
from apps.jobs.shell.hostkey import gateway_host_key


class Command(BaseCommand):
    help = "Serve the SSH gateway into running jobs."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default=None, help="address (default SSH_GATEWAY_BIND)")
        parser.add_argument("--port", type=int, default=None, help="default SSH_GATEWAY_PORT")

    def handle(self, *args, bind: str | None, port: int | None, **options) -> None:
        port = port or settings.SSH_GATEWAY_PORT
        if not port:
            raise CommandError("No port: set SSH_GATEWAY_PORT (make run uses 2222) or --port.")
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        key = gateway_host_key()
        self.stdout.write(
            f"SSH gateway on {bind or settings.SSH_GATEWAY_BIND}:{port}, host key "
            f"{key.fingerprint}",
        )
        self.stdout.flush()
        run(bind, port)
