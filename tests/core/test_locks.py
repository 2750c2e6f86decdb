"""The Redis lock shared by the endpoint sync and the Playground's adapter loads: work runs
under it, and never unlocked when another holder keeps it past the wait."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings

from apps.core.locks import LockBusy, redis_lock


def test_work_runs_under_the_lock_and_it_is_released_after():
    name = f"trainyard:test:lock:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    with redis_lock(name, 5):
        assert client.exists(name)
    assert not client.exists(name)


def test_a_lock_held_elsewhere_past_the_wait_is_lock_busy_and_nothing_runs():
    name = f"trainyard:test:lock:{uuid.uuid4().hex}"
    other = redis.Redis.from_url(settings.REDIS_URL).lock(name, timeout=10)
    assert other.acquire(blocking=False)
    ran = []
    try:
        with pytest.raises(LockBusy), redis_lock(name, 0.3):
            ran.append(True)
    finally:
        other.release()
    assert ran == []
