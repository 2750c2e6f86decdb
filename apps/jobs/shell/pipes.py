"""The Redis lists a session's bytes travel through, between the control plane's side (the
SSH gateway, the job page's terminal) and the runner's long-polls (runner_api.shell).

Per attempt, the sessions waiting for its runner: `accept:<attempt>` (JSON ShellRequests).
Per session: `meta` (which job and token may carry it), `down` (frames for the workload)
and `up` (frames from it). Every key expires SESSION_TTL_S after its last use, so a session
whose two ends both vanished leaves nothing behind; a closed one is gone within
CLOSE_LINGER_S (long enough for the runner to read the close frame)."""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings

PREFIX = "trainyard:shell"
SESSION_TTL_S = 600
ACCEPT_TTL_S = 120
CLOSE_LINGER_S = 30
TAKE_MAX_BYTES = 512 * 1024
CONNECT_TIMEOUT_S = 5.0

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def client() -> aioredis.Redis:
    """This event loop's client (a connection pool belongs to the loop that made it).

    Its reads have no socket timeout: every wait here is a blocking pop bounded by its own
    timeout (up to runner.protocol.SHELL_WAIT_MAX_S), and redis-py 8's default socket timeout
    (5 s) cut any longer pop short with a TimeoutError — the runner's long-polls failed and a
    terminal's quiet session broke after 5 s. (The channel layer reads the same way, for the
    same reason: config/settings.py.) Connects still time out, and keepalive notices a peer
    that vanished."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        options = {"socket_timeout": None, "socket_connect_timeout": CONNECT_TIMEOUT_S}
        if not settings.REDIS_URL.startswith("unix://"):  # a Unix socket refuses keepalive
            options["socket_keepalive"] = True
        found = _clients[loop] = aioredis.Redis.from_url(settings.REDIS_URL, **options)
    return found


def accept_key(attempt_id: int) -> str:
    return f"{PREFIX}:accept:{attempt_id}"


def _key(sid: str, part: str) -> str:
    return f"{PREFIX}:s:{sid}:{part}"


@dataclass(frozen=True)
class SessionMeta:
    job_id: str
    attempt_id: int
    nonce: str  # the attempt's runner token nonce: only its runner may carry the session


async def create(sid: str, meta: SessionMeta, request: dict) -> None:
    """Register the session and queue its request for the attempt's runner."""
    redis = client()
    body = json.dumps({"job": meta.job_id, "attempt": meta.attempt_id, "nonce": meta.nonce})
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(_key(sid, "meta"), body, ex=SESSION_TTL_S)
        pipe.rpush(accept_key(meta.attempt_id), json.dumps(request))
        pipe.expire(accept_key(meta.attempt_id), ACCEPT_TTL_S)
        await pipe.execute()


async def withdraw(attempt_id: int, request: dict) -> None:
    """Take back a request no runner took (its opener gave up)."""
    await client().lrem(accept_key(attempt_id), 0, json.dumps(request))


async def meta_of(sid: str) -> SessionMeta | None:
    raw = await client().get(_key(sid, "meta"))
    if raw is None:
        return None
    data = json.loads(raw)
    return SessionMeta(job_id=data["job"], attempt_id=int(data["attempt"]), nonce=data["nonce"])


async def take_requests(attempt_id: int, wait_s: float) -> list[dict]:
    """The requests waiting for this attempt's runner, waiting up to `wait_s` for one."""
    redis = client()
    first = await _blocking_pop(redis, accept_key(attempt_id), wait_s)
    if first is None:
        return []
    found = [first]
    more = await redis.lpop(accept_key(attempt_id), 64)
    found.extend(more or [])
    return [json.loads(item) for item in found]


async def push(sid: str, direction: str, frames: list[bytes]) -> int:
    """Append encoded frames to the session's `direction` ("down" or "up") list; the list's
    length after (what the other end has not taken yet)."""
    if not frames:
        return await client().llen(_key(sid, direction))
    redis = client()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.rpush(_key(sid, direction), *frames)
        pipe.expire(_key(sid, direction), SESSION_TTL_S)
        pipe.expire(_key(sid, "meta"), SESSION_TTL_S)
        length, *_ = await pipe.execute()
    return int(length)


async def backlog(sid: str, direction: str) -> int:
    return int(await client().llen(_key(sid, direction)))


async def take(sid: str, direction: str, wait_s: float) -> bytes:
    """The frames waiting in the session's `direction` list (about TAKE_MAX_BYTES at most),
    waiting up to `wait_s` for the first; b"" when none came."""
    redis = client()
    first = await _blocking_pop(redis, _key(sid, direction), wait_s)
    if first is None:
        return b""
    chunks = [first]
    size = len(first)
    while size < TAKE_MAX_BYTES:
        more = await redis.lpop(_key(sid, direction), 16)
        if not more:
            break
        chunks.extend(more)
        size += sum(len(item) for item in more)
    return b"".join(chunks)


async def close(sid: str) -> None:
    """The session is over: its keys go after CLOSE_LINGER_S (the close frame is read)."""
    redis = client()
    async with redis.pipeline(transaction=False) as pipe:
        for part in ("meta", "down", "up"):
            pipe.expire(_key(sid, part), CLOSE_LINGER_S)
        await pipe.execute()


async def _blocking_pop(redis: aioredis.Redis, key: str, wait_s: float) -> bytes | None:
    if wait_s <= 0:
        return await redis.lpop(key)
    found = await redis.blpop([key], timeout=wait_s)
    return found[1] if found else None
