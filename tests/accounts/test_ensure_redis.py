"""`make run`'s own Redis, started by the real `manage.py ensure_redis` with REDIS_URL unset:
a client without the password is refused (NOAUTH), one with it works, and the password is in
a file only this user reads, never in a process's argv."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
import redis

from tests.live import ROOT, base_env, free_port, wait_until

pytestmark = pytest.mark.live


def _env(var_dir: Path, **overrides: str) -> dict[str, str]:
    env = base_env(DEBUG="1", TRAINYARD_VAR_DIR=str(var_dir), **overrides)
    if "REDIS_URL" not in overrides:
        env.pop("REDIS_URL", None)  # unset, as on a newcomer's laptop
    return env


def _ensure_redis(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "ensure_redis"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _raw(path: Path, command: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(command)
        return sock.recv(256)


@pytest.fixture
def var_dir(tmp_path):
    var = tmp_path / "var"
    yield var
    pidfile = var / "redis" / "redis.pid"
    with suppress(FileNotFoundError, ProcessLookupError, ValueError):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_make_runs_own_redis_requires_the_password_it_made_on_first_run(var_dir):
    first = _ensure_redis(_env(var_dir))
    assert first.returncode == 0, first.stdout + first.stderr
    sock = var_dir / "redis" / "redis.sock"
    assert f"Started redis-server on {sock}, password required." in first.stdout

    assert _raw(sock, b"PING\r\n").startswith(b"-NOAUTH")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=str(sock), password="not-the-password").ping()
    password_file = var_dir / "redis" / "password"
    password = password_file.read_text().strip()
    assert len(password) >= 32
    assert redis.Redis(unix_socket_path=str(sock), password=password).ping()

    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((var_dir / "redis").stat().st_mode) == 0o700
    pid = int((var_dir / "redis" / "redis.pid").read_text())
    assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert password not in first.stdout + first.stderr

    # The next run finds it (same password, same server) rather than starting another.
    again = _ensure_redis(_env(var_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Redis answers at unix://:***@" in again.stdout
    assert password_file.read_text().strip() == password
    assert int((var_dir / "redis" / "redis.pid").read_text()) == pid


def test_it_never_starts_a_redis_without_a_password(var_dir):
    port = free_port()
    result = _ensure_redis(_env(var_dir, REDIS_URL=f"redis://127.0.0.1:{port}/0"))

    assert result.returncode != 0
    assert "starts none without a password" in result.stderr
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there


def test_a_redis_url_with_a_password_starts_one_that_requires_it(var_dir):
    port = free_port()
    url = f"redis://:pass-{port}@127.0.0.1:{port}/0"
    result = _ensure_redis(_env(var_dir, REDIS_URL=url))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Started redis-server on 127.0.0.1:{port}, password required." in result.stdout

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        assert wait_until(lambda: sock.recv(256), timeout=5).startswith(b"-NOAUTH")
    assert redis.Redis.from_url(url).ping()


PUSH_AND_RECEIVE = """
import asyncio, django
django.setup()
from channels.layers import get_channel_layer

async def main():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add("job-1", channel)
    await layer.group_send("job-1", {"type": "job.update", "text": "status running"})
    print(await asyncio.wait_for(layer.receive(channel), 10))

asyncio.run(main())
"""


def test_live_pushes_go_through_make_runs_own_redis_on_its_unix_socket(var_dir):
    """The job page's live updates travel through the channel layer; under `make run` that is
    the stack's own Redis on a Unix socket, whose connections take no TCP options."""
    env = _env(var_dir)
    started = _ensure_redis(env)
    assert started.returncode == 0, started.stdout + started.stderr

    result = subprocess.run(
        [sys.executable, "-c", PUSH_AND_RECEIVE],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "'text': 'status running'" in result.stdout
