"""`manage.py ensure_redis`: make sure the Redis at REDIS_URL answers.

When nothing answers, the URL points at this machine and `redis-server` is installed, start
one (no persistence, data under `var/`). Otherwise stop with a message that says how to get
one. `make run` calls this before it starts the web server, worker and beat.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from urllib.parse import urlparse

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


class Command(BaseCommand):
    help = "Check that Redis answers at REDIS_URL; start a local one if possible."

    def handle(self, *args, **options) -> None:
        url = settings.REDIS_URL
        if redis_answers(url):
            self.stdout.write(f"Redis answers at {url}.")
            return
        parsed = urlparse(url)
        server = shutil.which("redis-server")
        if parsed.hostname not in LOCAL_HOSTS or server is None:
            raise CommandError(
                f"No Redis answers at {url}. Install one (Debian: `apt-get install "
                "redis-server`; macOS: `brew install redis`), point REDIS_URL at one, or run "
                "everything with `docker compose up`."
            )
        data_dir = settings.VAR_DIR / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        port = str(parsed.port or 6379)
        subprocess.run(
            [
                server,
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                port,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(data_dir),
                "--logfile",
                str(data_dir / "redis.log"),
            ],
            check=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if redis_answers(url):
                self.stdout.write(f"Started redis-server on 127.0.0.1:{port}.")
                return
            time.sleep(0.1)
        raise CommandError(f"Started redis-server but it does not answer; see {data_dir}.")
