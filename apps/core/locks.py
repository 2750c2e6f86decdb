"""A lock across processes (web servers, workers), held in Redis."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis
from django.conf import settings

from apps.core.errors import Retryable


class LockBusy(Retryable):
    """The lock stayed taken for the whole wait: try again later."""


@contextlib.contextmanager
def redis_lock(name: str, timeout_s: float) -> Iterator[None]:
    """Hold the Redis lock `name` (it expires after `timeout_s` if its holder dies), waiting
    up to `timeout_s` for it; raises LockBusy when it could not be had, so the work never
    runs unlocked."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(name, timeout=timeout_s)
    if not lock.acquire(blocking=True, blocking_timeout=timeout_s):
        raise LockBusy(f"{name} is still taken after {timeout_s:g} s")
    try:
        yield
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()
