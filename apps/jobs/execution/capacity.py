"""When capacity may have changed, so that waiting jobs are worth dispatching again.

Every attempt that ends frees capacity: after its commit it bumps a counter in Redis and
sends `jobs.dispatch_waiting`, which places the waiting jobs that fit at once
(organizations in turn), so a freed slot is taken within milliseconds rather than on the
next reconcile tick. Those sends coalesce: while one is queued and not yet started
(`PENDING_KEY`, at most PENDING_TTL_S), further frees send nothing — the queued one reads
the waiting jobs when it runs, so it sees them all.

Reconcile stays the safety net: it re-dispatches waiting jobs when the counter moved since
its last look (a send the broker lost), and otherwise every DISPATCH_SWEEP_S (offers edited
in the admin). Without the counter, every pass enqueued a dispatch per waiting job: one
organization with many waiting jobs flooded the queue, and everyone else's dispatch waited
behind it.
"""

from __future__ import annotations

import time
from contextlib import suppress

import redis
from django.conf import settings

from apps.core.redis_client import shared_redis
from apps.core.transactions import after_commit
from apps.jobs import enqueue

EPOCH_KEY = "trainyard:capacity:epoch"
PENDING_KEY = "trainyard:capacity:dispatch_pending"
PENDING_TTL_S = 10
SEEN_KEY = "trainyard:capacity:seen"
SWEPT_KEY = "trainyard:capacity:swept_at"


def _bump() -> None:
    try:
        client = shared_redis()
        client.incr(EPOCH_KEY)
        send = client.set(PENDING_KEY, 1, nx=True, ex=PENDING_TTL_S)
    except redis.RedisError:  # the periodic sweep catches up
        return
    if send:
        enqueue.dispatch_waiting_now()


def dispatch_started() -> None:
    """The queued `jobs.dispatch_waiting` runs: a capacity freed from now on sends another."""
    with suppress(redis.RedisError):
        shared_redis().delete(PENDING_KEY)


def freed_on_commit() -> None:
    """Capacity frees when the caller's transaction commits."""
    after_commit(_bump)


def worth_dispatching() -> bool:
    """True when capacity changed since the last call that said so, or a sweep is due.
    A Redis that does not answer says True: dispatching too often beats never."""
    try:
        client = shared_redis()
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
