"""`manage.py ensure_redis`: make sure the stack's Redis answers, with a password.

REDIS_URL unset (`make run`'s default): the stack's own Redis (config/local_redis.py), on a
Unix socket under `var/redis/` that only this user reaches, with the password generated on
first run and kept in `var/redis/password` (0600). Started here when it does not answer (no
persistence, daemonized: it outlives `make run` and is reused by the next one). The password
goes in a 0600 config file, never in argv, where any local user could read it.

REDIS_URL set: that Redis must answer. When nothing answers and the URL names this machine
with a password, a Redis is started on its port with that password; one without a password
is never started (anything on this host could use it). `make run` calls this before it
starts the web server, worker and beat.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config import local_redis

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
START_TIMEOUT_S = 10.0


def redis_answers(url: str) -> bool:
    """True when Redis answers PING at `url`; CommandError when it answers but refuses the
    URL's password (another Redis holds the address)."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.AuthenticationError as exc:
        raise CommandError(
            f"A Redis answers at {_shown(url)} but refuses its password ({exc}): it is "
            "another Redis. Stop it, or point REDIS_URL at the right one."
        ) from exc
    except redis.RedisError:
        return False


def _shown(url: str) -> str:
    """The URL without its password, for messages."""
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    return url.replace(f":{parsed.password}@", ":***@", 1)


def _start(server: str, data_dir: Path, lines: list[str]) -> None:
    conf = data_dir / "redis.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(
            "\n".join(
                [
                    *lines,
                    'save ""',
                    "appendonly no",
                    "daemonize yes",
                    f"dir {data_dir}",
                    f"logfile {data_dir / 'redis.log'}",
                    f"pidfile {data_dir / 'redis.pid'}",
                ]
            )
            + "\n"
        )
    os.chmod(conf, 0o600)
    subprocess.run([server, str(conf)], check=True)


class Command(BaseCommand):
    help = "Check that the stack's Redis answers; start it (with a password) if possible."

    def handle(self, *args, **options) -> None:
        url = settings.REDIS_URL
        if redis_answers(url):
            self.stdout.write(f"Redis answers at {_shown(url)}.")
            return
        server = shutil.which("redis-server")
        if server is None:
            raise CommandError(
                f"No Redis answers at {_shown(url)}. Install one (Debian: `apt-get install "
                "redis-server`; macOS: `brew install redis`), point REDIS_URL at one, or run "
                "everything with `docker compose up`."
            )
        where = self._start_own(server) if settings.REDIS_OWN else self._start_at(server, url)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if redis_answers(url):
                self.stdout.write(f"Started redis-server on {where}, password required.")
                return
            time.sleep(0.1)
        raise CommandError(f"Started redis-server but it does not answer; see {where}.")

    def _start_own(self, server: str) -> str:
        data_dir = local_redis.redis_dir(settings.VAR_DIR)
        socket = local_redis.socket_path(settings.VAR_DIR)
        if len(str(socket)) > local_redis.SOCKET_PATH_MAX:
            raise CommandError(
                f"The Redis socket path {socket} is too long for a Unix socket: choose a "
                "shorter TRAINYARD_VAR_DIR, or set REDIS_URL."
            )
        password = local_redis.password(settings.VAR_DIR)  # makes var/redis (0700) too
        _start(
            server,
            data_dir,
            ["port 0", f"unixsocket {socket}", "unixsocketperm 700", f"requirepass {password}"],
        )
        return str(socket)

    def _start_at(self, server: str, url: str) -> str:
        parsed = urlparse(url)
        if parsed.scheme != "redis" or parsed.hostname not in LOCAL_HOSTS:
            raise CommandError(
                f"No Redis answers at {_shown(url)}. Start it, point REDIS_URL at one, or "
                "unset REDIS_URL: `make run` then starts its own, with a password."
            )
        if not parsed.password:
            raise CommandError(
                f"No Redis answers at {_shown(url)}, and `make run` starts none without a "
                "password (anything on this machine could use it): put one in REDIS_URL "
                "(redis://:PASSWORD@127.0.0.1:6379/0), or unset REDIS_URL to have `make run` "
                "start its own."
            )
        data_dir = settings.VAR_DIR / "redis"
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        port = parsed.port or 6379
        _start(
            server,
            data_dir,
            ["bind 127.0.0.1", f"port {port}", f"requirepass {unquote(parsed.password)}"],
        )
        return f"127.0.0.1:{port}"
