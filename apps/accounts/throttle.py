"""Throttles, counted in Redis so every web process shares them.

- Sign-in: failed sign-ins are counted per username and per client address in a window of
  SIGN_IN_WINDOW_S; past SIGN_IN_MAX_FAILURES_PER_USER (or ..._PER_ADDRESS) the sign-in form
  answers 429 with Retry-After until the window ends, even for the right password. A
  successful sign-in clears the username's count.
- API: each API key may make API_REQUESTS_PER_MINUTE requests a minute (a fixed window);
  past it the API answers 429 `rate_limited` with Retry-After. Session users of the API are
  covered by the sign-in throttle and CSRF; the runner's endpoints are not DRF views and
  have their own token rules.

A Redis that does not answer lets requests through: an outage must not lock everyone out.
"""

from __future__ import annotations

import time
from contextlib import suppress

import redis
from django.conf import settings
from rest_framework.throttling import BaseThrottle

from apps.accounts.models import ApiKey
from apps.core.redis_client import shared_redis

SIGN_IN_PREFIX = "trainyard:signin:"
API_PREFIX = "trainyard:throttle:key:"


def _user_key(username: str) -> str:
    return f"{SIGN_IN_PREFIX}user:{username.strip().lower()}"


def _sign_in_keys(username: str, address: str) -> list[tuple[str, int]]:
    return [
        (_user_key(username), settings.SIGN_IN_MAX_FAILURES_PER_USER),
        (f"{SIGN_IN_PREFIX}addr:{address}", settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS),
    ]


def sign_in_blocked_for(username: str, address: str) -> int:
    """Seconds until `username` may try to sign in from `address` again; 0 when it may."""
    try:
        client = shared_redis()
        waits = [
            max(client.ttl(key), 1)
            for key, limit in _sign_in_keys(username, address)
            if int(client.get(key) or 0) >= limit
        ]
    except redis.RedisError:
        return 0
    return max(waits, default=0)


def sign_in_failed(username: str, address: str) -> None:
    with suppress(redis.RedisError):
        pipe = shared_redis().pipeline()
        for key, _ in _sign_in_keys(username, address):
            pipe.incr(key)
            pipe.expire(key, int(settings.SIGN_IN_WINDOW_S), nx=True)
        pipe.execute()


def sign_in_succeeded(username: str) -> None:
    with suppress(redis.RedisError):
        shared_redis().delete(_user_key(username))


class ApiKeyRateThrottle(BaseThrottle):
    """API_REQUESTS_PER_MINUTE per API key, in fixed one-minute windows."""

    def allow_request(self, request, view) -> bool:
        if not isinstance(request.auth, ApiKey):
            return True
        window = int(time.time() // 60)
        self._retry_after = 60 - int(time.time()) % 60
        key = f"{API_PREFIX}{request.auth.pk}:{window}"
        try:
            pipe = shared_redis().pipeline()
            pipe.incr(key)
            pipe.expire(key, 61)
            count = pipe.execute()[0]
        except redis.RedisError:
            return True
        return count <= settings.API_REQUESTS_PER_MINUTE

    def wait(self) -> float | None:
        return getattr(self, "_retry_after", 60)
