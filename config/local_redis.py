"""`make run`'s own Redis, used when REDIS_URL is not set.

It listens on a Unix socket under `<TRAINYARD_VAR_DIR>/redis/` (a directory of mode 0700, the
socket 0700: no other local user reaches it, and no TCP port at all, so nothing on the
host's loopback — a workload, another user's process — can talk to it) and requires a
password generated on first use and kept in `<TRAINYARD_VAR_DIR>/redis/password` (0600).
Every process of a stack derives the same URL from its TRAINYARD_VAR_DIR, so web, worker,
beat and `manage.py` commands agree without passing the password around; `manage.py
ensure_redis` starts the server (its password in a 0600 config file, never in argv).

Standard library only: settings import it before Django is set up.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PASSWORD_FILE = "password"
SOCKET_FILE = "redis.sock"
# A Unix socket's path is at most 107 bytes on Linux (103 on macOS).
SOCKET_PATH_MAX = 100


def redis_dir(var_dir: Path) -> Path:
    return var_dir / "redis"


def socket_path(var_dir: Path) -> Path:
    return redis_dir(var_dir) / SOCKET_FILE


def password(var_dir: Path) -> str:
    """The stack's Redis password: read, or made on first use. Written to a temporary file
    and linked into place, so concurrent first runs agree on one password and none reads a
    half-written file."""
    path = redis_dir(var_dir) / PASSWORD_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    temporary = path.with_name(f".{PASSWORD_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process made it first: theirs it is
    finally:
        temporary.unlink()
    return path.read_text().strip()


def url(var_dir: Path) -> str:
    """The stack's REDIS_URL (redis-py's `unix://` form), with its password."""
    return f"unix://:{password(var_dir)}@{socket_path(var_dir)}?db=0"


def celery_broker_url(redis_url: str) -> str:
    """Kombu spells a Unix-socket Redis `redis+socket://` and its database `virtual_host`;
    any other URL is passed through."""
    if not redis_url.startswith("unix://"):
        return redis_url
    return "redis+socket://" + redis_url.removeprefix("unix://").replace("db=", "virtual_host=")


def channel_layer_host(redis_url: str, *, connect_timeout_s: float) -> dict:
    """The channel layer's connection options for `redis_url`: no socket timeout (see
    config/settings.py), a bounded connect, and TCP keepalive where there is TCP. A
    Unix-socket connection refuses the keepalive option (redis-py 8 raises TypeError on
    every connect), which under `make run`'s own Redis failed every live push."""
    host = {
        "address": redis_url,
        "socket_timeout": None,
        "socket_connect_timeout": connect_timeout_s,
    }
    if not redis_url.startswith("unix://"):
        host["socket_keepalive"] = True
    return host
