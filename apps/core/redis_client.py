"""One Redis client per process for the short commands of the control plane (coalescing
keys, throttles, watcher counts): made on first use, after a worker's fork, with a socket
timeout so a Redis that stops answering fails a call instead of hanging it."""

from __future__ import annotations

import redis
from django.conf import settings

SOCKET_TIMEOUT_S = 2

_client: redis.Redis | None = None


def shared_redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=SOCKET_TIMEOUT_S)
    return _client
