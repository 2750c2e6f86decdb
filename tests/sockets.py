"""Websockets in tests: a socket through the real ASGI application (origin check, session
auth), signed in as a user or anonymous, and a clean slate of the counts Redis keeps for
sockets and watchers (user ids restart with each test database, the counts would not)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import connections

from apps.core.live import SOCKETS_KEY
from config.asgi import application

# A socket test's marks: async, on a committed database (the consumer reads it from a thread
# of its own, outside the test's transaction).
SOCKET_TEST = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def session_cookie(user) -> str:
    """The cookie of a fresh signed-in session of `user`."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


async def websocket(
    path: str, user=None, origin: str = "http://127.0.0.1"
) -> WebsocketCommunicator:
    """A socket to `path`, not yet connected: signed in as `user`, or anonymous."""
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await database_sync_to_async(session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def forget_socket_counts(*watcher_patterns: str) -> None:
    """Delete every user's socket count, and the watcher counts whose keys match
    `watcher_patterns` (`"trainyard:watchers:billing.*"`)."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        keys = [*await client.keys(SOCKETS_KEY.format(user_id="*"))]
        for pattern in watcher_patterns:
            keys += await client.keys(pattern)
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def socket_counts_reset(*watcher_patterns: str):
    """A fixture that starts each socket test without the socket counts of earlier ones and
    the watcher counts matching `watcher_patterns`, and closes the database connections the
    consumers' threads opened once it ends (so the test database can be dropped)."""

    @pytest.fixture
    async def reset():
        await forget_socket_counts(*watcher_patterns)
        yield
        await database_sync_to_async(connections.close_all)()

    return reset
