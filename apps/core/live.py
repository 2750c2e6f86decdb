"""What every live page's websocket shares, whatever it watches: who is watching a channel
group (so a push nobody would receive is never rendered), the per-user socket cap, and a
consumer base that authorises at connect and again before forwarding (docs/realtime.md).

Apps subclass `GroupConsumer` with their own `_allowed` (may this user see the object?)
and `_group_for` (which group to join); this module knows no app.

Authorisation is not only at connect: before forwarding a push, a socket checks again that
its user may still see what it watches, at most once every `WS_REAUTH_INTERVAL_S` seconds
per socket (a setting, default 30), so a removed member stops receiving within that interval
at the cost of one query per socket per interval. A socket that fails the check is closed
with 4403 and the push is not sent.

Each user holds at most `WS_MAX_SOCKETS_PER_USER` sockets (a setting, default 20), counted
in Redis across every process: a sorted set per user of the open sockets' channel names,
each scored with when it was last seen (connect, then each re-check), so an entry a crashed
process left behind expires on its own after `WATCH_TTL_S`.

Close codes: 4401 not signed in; 4403 not (or no longer) allowed; 4429 too many sockets for
this user. A refusal at connect is sent right after the handshake, before any data, so the
page can tell a refusal from a network drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import redis
import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from apps.core.redis_client import shared_redis

WATCH_KEY = "trainyard:watchers:{group}"
WATCH_TTL_S = 24 * 3600
SOCKETS_KEY = "trainyard:sockets:user:{user_id}"

WS_REAUTH_INTERVAL_S = 30
WS_MAX_SOCKETS_PER_USER = 20

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_MANY = 4429


def reauth_interval_s() -> float:
    return getattr(settings, "WS_REAUTH_INTERVAL_S", WS_REAUTH_INTERVAL_S)


def max_sockets_per_user() -> int:
    return getattr(settings, "WS_MAX_SOCKETS_PER_USER", WS_MAX_SOCKETS_PER_USER)


def watch_key(group: str) -> str:
    return WATCH_KEY.format(group=group)


def sockets_key(user_id: int) -> str:
    return SOCKETS_KEY.format(user_id=user_id)


def watched(group: str) -> bool:
    """Whether any page holds a socket on `group` now. A crashed consumer may leave a count
    behind (it expires within a day): that only costs a push nobody receives."""
    try:
        return int(shared_redis().get(watch_key(group)) or 0) > 0
    except redis.RedisError:
        return True


def watched_groups(*groups: str) -> list[bool]:
    """`watched` for each of `groups`, in one round trip to Redis (a job's state change is
    pushed to four groups)."""
    try:
        counts = shared_redis().mget([watch_key(group) for group in groups])
    except redis.RedisError:
        return [True] * len(groups)
    return [int(count or 0) > 0 for count in counts]


async def count_watchers(group: str, delta: int) -> None:
    """Count a page in (+1) or out (-1) of the group's watchers."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        key = watch_key(group)
        await client.incrby(key, delta)
        await client.expire(key, WATCH_TTL_S)
    finally:
        await client.aclose()


async def take_socket_slot(user_id: int, channel_name: str) -> bool:
    """Count this socket in for its user; False (and counted out again) when the user
    already holds the maximum."""
    key = sockets_key(user_id)
    now = time.time()
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        async with client.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", now - WATCH_TTL_S)
            pipe.zadd(key, {channel_name: now})
            pipe.zcard(key)
            pipe.expire(key, WATCH_TTL_S)
            _, _, held, _ = await pipe.execute()
        if held > max_sockets_per_user():
            await client.zrem(key, channel_name)
            return False
        return True
    finally:
        await client.aclose()


async def touch_socket_slot(user_id: int, channel_name: str) -> None:
    """Mark a live socket as still open, so its entry does not expire under it."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        await client.zadd(sockets_key(user_id), {channel_name: time.time()}, xx=True)
        await client.expire(sockets_key(user_id), WATCH_TTL_S)
    finally:
        await client.aclose()


async def release_socket_slot(user_id: int, channel_name: str) -> None:
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        await client.zrem(sockets_key(user_id), channel_name)
    finally:
        await client.aclose()


class GroupConsumer(AsyncWebsocketConsumer):
    """A page's socket on one channel group: refuses (4401/4403/4429) or joins, counts
    itself as a watcher, and re-checks its right before each push it forwards."""

    group: str | None = None
    slot_user_id: int | None = None
    checked_at: float = 0.0
    revoked: bool = False

    async def _allowed(self, user) -> bool:
        raise NotImplementedError

    def _group_for(self) -> str:
        raise NotImplementedError

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
        elif not await self._allowed(user):
            await self._refuse(CLOSE_FORBIDDEN)
        elif not await take_socket_slot(user.pk, self.channel_name):
            await self._refuse(CLOSE_TOO_MANY)
        else:
            self.slot_user_id = user.pk
            self.checked_at = time.monotonic()
            await self._join(self._group_for())

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def _join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await count_watchers(group, +1)
        await self.accept()

    async def _leave(self) -> None:
        """Leave the group and give the socket's slot back; safe to call twice."""
        group, self.group = self.group, None
        if group:
            await self.channel_layer.group_discard(group, self.channel_name)
            await count_watchers(group, -1)
        user_id, self.slot_user_id = self.slot_user_id, None
        if user_id is not None:
            await release_socket_slot(user_id, self.channel_name)

    async def _still_allowed(self) -> bool:
        """Re-check the socket's right to what it watches, at most once per interval; on a
        failure close it with 4403 (the caller then drops the push)."""
        if self.revoked:
            return False
        now = time.monotonic()
        if now - self.checked_at < reauth_interval_s():
            return True
        self.checked_at = now
        if await self._allowed(self.scope["user"]):
            if self.slot_user_id is not None:
                await touch_socket_slot(self.slot_user_id, self.channel_name)
            return True
        self.revoked = True
        await self._leave()
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    async def _forward(self, message: dict) -> None:
        if await self._still_allowed():
            await self.send(text_data=message["html"])

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Pages only listen; anything they send is ignored."""


class CoalescingConsumer(GroupConsumer):
    """A GroupConsumer whose pushes only say "something changed": `changed()` renders the
    whole live part (`render_changed`, sync, run in a thread) at once, then at most once per
    `coalesce_s` however many changes arrive meanwhile, and always once more after the last
    one, so the page ends on the truth. A socket that closes stops its renderer."""

    coalesce_s: float = 0.5
    _dirty: bool = False
    _renderer: asyncio.Task | None = None

    def render_changed(self) -> str:
        """The HTML to send for a change ("" sends nothing). Runs in a thread (the ORM)."""
        raise NotImplementedError

    async def changed(self) -> None:
        if not await self._still_allowed():
            return
        self._dirty = True
        if self._renderer is None or self._renderer.done():
            self._renderer = asyncio.ensure_future(self._render_while_dirty())

    async def _render_while_dirty(self) -> None:
        while self._dirty and self.group is not None:
            self._dirty = False
            html = await database_sync_to_async(self.render_changed)()
            if self.group is None:
                return
            if html:
                await self.send(text_data=html)
            await asyncio.sleep(self.coalesce_s)

    async def disconnect(self, code: int) -> None:
        renderer, self._renderer = self._renderer, None
        if renderer is not None and not renderer.done():
            renderer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renderer
        await super().disconnect(code)
