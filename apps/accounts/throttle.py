"""Throttles, counted in Redis so every web process shares them.

- Sign-in (the site's form and the admin's, alike). Failed sign-ins are counted in fixed
  windows of SIGN_IN_WINDOW_S, started by a window's first failure, under three keys:

  * the (username, client address) pair: past SIGN_IN_MAX_FAILURES_PER_PAIR that address
    is refused for that username (429 with Retry-After, the right password included) until
    the pair's window ends. Whoever guesses from one address locks out only that pair: the
    user signs in from any other address as before.
  * the client address: past SIGN_IN_MAX_FAILURES_PER_ADDRESS failures for any usernames,
    the address is refused for every username (password spraying).
  * the username, over all addresses: past SIGN_IN_MAX_FAILURES_PER_USER the username is
    under attack and each address gets one failure for it per window (instead of
    SIGN_IN_MAX_FAILURES_PER_PAIR), so a guesser with many addresses is slowed to one guess
    per address per window. The username itself is never locked: an address with no
    failure for it still signs in with the right password, and an address the user signed
    in from within KNOWN_ADDRESS_S keeps the full per-pair allowance.

  A successful sign-in clears its pair's count and marks the address known for the user;
  it does not clear the address's or the username's count (a sprayer holding one account
  must not reset its own budget). IPv6 addresses count by their /64, which one host
  usually holds whole. Usernames are counted case-insensitively and stored hashed.
- API: each API key may make API_REQUESTS_PER_MINUTE requests a minute (a fixed window),
  the REST API's and the OpenAI-compatible path's (`/v1/`) counted together; past it both
  answer 429 `rate_limited` with Retry-After. Session users of the API are
  covered by the sign-in throttle and CSRF; the runner's endpoints are not DRF views and
  have their own token rules.

A Redis that does not answer lets requests through: an outage must not lock everyone out.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from contextlib import suppress

import redis
from django.conf import settings
from rest_framework.throttling import BaseThrottle

from apps.accounts.models import ApiKey
from apps.core.redis_client import shared_redis

SIGN_IN_PREFIX = "trainyard:signin:"
API_PREFIX = "trainyard:throttle:key:"
# How long a successful sign-in keeps its address "known" for that user.
KNOWN_ADDRESS_S = 30 * 24 * 3600
# The per-pair allowance of an unknown address while its username is under attack.
UNDER_ATTACK_PAIR_FAILURES = 1


def _user(username: str) -> str:
    return hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]


def _address(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _keys(username: str, address: str) -> dict[str, str]:
    user, addr = _user(username), _address(address)
    return {
        "pair": f"{SIGN_IN_PREFIX}pair:{user}:{addr}",
        "addr": f"{SIGN_IN_PREFIX}addr:{addr}",
        "user": f"{SIGN_IN_PREFIX}user:{user}",
        "known": f"{SIGN_IN_PREFIX}known:{user}:{addr}",
    }


def sign_in_blocked_for(username: str, address: str) -> int:
    """Seconds until `username` may try to sign in from `address` again; 0 when it may."""
    keys = _keys(username, address)
    try:
        pipe = shared_redis().pipeline()
        pipe.mget(keys["pair"], keys["addr"], keys["user"], keys["known"])
        pipe.ttl(keys["pair"])
        pipe.ttl(keys["addr"])
        (pair, addr, user, known), pair_ttl, addr_ttl = pipe.execute()
    except redis.RedisError:
        return 0
    pair_limit = settings.SIGN_IN_MAX_FAILURES_PER_PAIR
    if int(user or 0) >= settings.SIGN_IN_MAX_FAILURES_PER_USER and not known:
        pair_limit = min(pair_limit, UNDER_ATTACK_PAIR_FAILURES)
    waits = []
    if int(pair or 0) >= pair_limit:
        waits.append(max(pair_ttl, 1))
    if int(addr or 0) >= settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS:
        waits.append(max(addr_ttl, 1))
    return max(waits, default=0)


def sign_in_failed(username: str, address: str) -> None:
    keys = _keys(username, address)
    with suppress(redis.RedisError):
        pipe = shared_redis().pipeline()
        for name in ("pair", "addr", "user"):
            pipe.incr(keys[name])
            pipe.expire(keys[name], int(settings.SIGN_IN_WINDOW_S), nx=True)
        pipe.execute()


def sign_in_succeeded(username: str, address: str) -> None:
    keys = _keys(username, address)
    with suppress(redis.RedisError):
        pipe = shared_redis().pipeline()
        pipe.delete(keys["pair"])
        pipe.set(keys["known"], 1, ex=KNOWN_ADDRESS_S)
        pipe.execute()


def api_key_request_counted(key: ApiKey) -> int:
    """Count one request of `key` in its current window (the REST API's and the OpenAI
    path's together). Returns 0 when the request may go on, else the seconds until the
    window ends."""
    now = time.time()
    counter = f"{API_PREFIX}{key.pk}:{int(now // 60)}"
    try:
        pipe = shared_redis().pipeline()
        pipe.incr(counter)
        pipe.expire(counter, 61)
        count = pipe.execute()[0]
    except redis.RedisError:
        return 0
    return 0 if count <= settings.API_REQUESTS_PER_MINUTE else 60 - int(now) % 60


class ApiKeyRateThrottle(BaseThrottle):
    """API_REQUESTS_PER_MINUTE per API key, in fixed one-minute windows."""

    def allow_request(self, request, view) -> bool:
        if not isinstance(request.auth, ApiKey):
            return True
        self._retry_after = api_key_request_counted(request.auth)
        return not self._retry_after

    def wait(self) -> float | None:
        return getattr(self, "_retry_after", 60)
