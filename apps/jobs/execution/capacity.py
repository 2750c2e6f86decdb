"""When capacity may have changed, so that waiting jobs are worth dispatching again.

Every attempt that ends frees capacity: it bumps a counter in Redis (after its commit).
Reconcile re-dispatches waiting jobs when the counter moved since its last look, and
otherwise only every DISPATCH_SWEEP_S (offers edited in the admin, a message the broker
lost). Without this, every pass enqueued a dispatch per waiting job: one organization with
many waiting jobs flooded the queue, and everyone else's dispatch waited behind it.
"""

from __future__ import annotations

import time
from contextlib import suppress

import redis
from django.conf import settings

from apps.core.transactions import after_commit

EPOCH_KEY = "trainyard:capacity:epoch"
SEEN_KEY = "trainyard:capacity:seen"
SWEPT_KEY = "trainyard:capacity:swept_at"
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    return _client


def _bump() -> None:
    with suppress(redis.RedisError):  # the periodic sweep catches up
        _redis().incr(EPOCH_KEY)


def freed_on_commit() -> None:
    """Capacity frees when the caller's transaction commits."""
    after_commit(_bump)


def worth_dispatching() -> bool:
    """True when capacity changed since the last call that said so, or a sweep is due.
    A Redis that does not answer says True: dispatching too often beats never."""
    try:
        client = _redis()
        epoch = int(client.get(EPOCH_KEY) or 0)
        seen = int(client.get(SEEN_KEY) or -1)
        swept = float(client.get(SWEPT_KEY) or 0)
        now = time.time()
        if epoch == seen and now - swept < settings.DISPATCH_SWEEP_S:
            return False
        client.mset({SEEN_KEY: epoch, SWEPT_KEY: now})
        return True
    except redis.RedisError:
        return True
