"""Admission control for the runner protocol, in front of Django (ASGI).

Django's ASGI handler runs each request's sync view in a thread of its own, and each thread
takes one of the process's DATABASE_POOL_SIZE pooled connections. With hundreds of runners
posting log batches and heartbeats at once, hundreds of threads queue for those few
connections; the pool's wait (30 s) runs out, and everything in the pile answers 500: the
runners' requests, and API calls and pages too (the bench that found it: `bench_scale.py`).

So at most RUNNER_MAX_CONCURRENT of the runner protocol's small, frequent requests (`spec`,
`started`, `heartbeat`, `logs`, `exit`, and a relay's bundles of them) run in Django at once
per web process; by default two fewer than the pool, which leaves connections for people's
pages and the API. The rest wait here, in the event loop (no thread, no connection), in
arrival order, for up to RUNNER_QUEUE_TIMEOUT_S; past that they are answered 503
`overloaded` with `Retry-After`.
Log batches, by far the most of them, may hold at most all slots but one: a heartbeat,
`started` or `exit` never queues behind a pile of batches (a batch served counts as a
heartbeat too, `supervision.runner_heard`). A relay's bundle waits as a batch does, except
its heartbeat lane's (`relay?calls=heartbeat`, heartbeats only), which goes as a heartbeat.
The runner retries a 503 with backoff and its lines stay spooled on disk until stored, so
an overloaded control plane slows runners down and loses nothing. Uploads and downloads
(artifacts, workdirs) are not gated: they are few, and long.

A slot is taken only once the request could use it at once. Anyone can open a connection
that sends a runner path's headers and never its body; had it held a slot while Django
waited for that body, a few dozen of them would have starved every tenant's heartbeats. So:

- a call at `jobs/<id>/...` without a runner token that checks out (its HMAC: no database,
  which is what the slots guard) goes to Django without a slot and without its body: the
  view refuses it (400 `unsupported_protocol` or 401) before it reads a byte;
- every other runner request's body (small: the body guard caps it at REQUEST_MAX_BYTES)
  must arrive within RUNNER_BODY_TIMEOUT_S of the headers, read here in the event loop
  with no slot held; past that it is answered 408 `request_timeout`;
- at most RUNNER_MAX_PENDING_PER_CLIENT such requests from one client address may be
  sending their bodies at once; past that it is answered 429 `too_many_requests` at once.

Only then does the request wait for its slot, and Django is handed the body already read.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable

from apps.jobs.execution.tokens import nonce_from
from runner.protocol import RELAY_HEARTBEATS_QUERY

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
RUNNER_PROTOCOL = re.compile(
    r"^/api/v1/runner/(?:jobs/[^/]+/(spec|started|heartbeat|logs|exit)|(relay))/?$"
)
LOG_BATCH = "logs"
HEARTBEATS_QUERY = RELAY_HEARTBEATS_QUERY.encode()
OVERLOADED = "overloaded"
REQUEST_TIMEOUT = "request_timeout"
TOO_MANY_REQUESTS = "too_many_requests"
RETRY_AFTER_S = 1
BODY_TIMEOUT_S = 15.0
MAX_PENDING_PER_CLIENT = 32


class RunnerAdmission:
    """The ASGI wrapper: `limit` runner requests at a time (log batches: `limit - 1` at
    most), each waiting at most `timeout_s` for its turn. One per process; its semaphores
    belong to the event loop that first uses them (uvicorn runs one loop per process)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        timeout_s: float,
        body_timeout_s: float = BODY_TIMEOUT_S,
        max_pending_per_client: int = MAX_PENDING_PER_CLIENT,
    ) -> None:
        self.app = app
        self.limit = max(2, limit)
        self.timeout_s = timeout_s
        self.body_timeout_s = body_timeout_s
        self.max_pending_per_client = max(1, max_pending_per_client)
        self.pending: Counter[str] = Counter()  # per client address: bodies still arriving
        self._slots: asyncio.Semaphore | None = None
        self._batch_slots: asyncio.Semaphore | None = None

    @property
    def slots(self) -> asyncio.Semaphore:
        """Every gated request holds one of these while it runs."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        return self._slots

    @property
    def batch_slots(self) -> asyncio.Semaphore:
        """A log batch holds one of these too, taken first: one slot is always left over
        for the other calls."""
        if self._batch_slots is None:
            self._batch_slots = asyncio.Semaphore(self.limit - 1)
        return self._batch_slots

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        match = RUNNER_PROTOCOL.match(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        if match[1] is not None and not _signed_token(scope):
            await self.app(scope, _without_body(receive), send)
            return
        client = _client_of(scope)
        if self.pending[client] >= self.max_pending_per_client:
            await _refuse(
                send, 429, TOO_MANY_REQUESTS, _TOO_MANY.format(self.max_pending_per_client)
            )
            return
        self.pending[client] += 1
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await _read_body(receive)
        except TimeoutError:
            await _refuse(send, 408, REQUEST_TIMEOUT, _TOO_SLOW.format(self.body_timeout_s))
            return
        finally:
            self.pending[client] -= 1
            if self.pending[client] <= 0:
                del self.pending[client]
        if body is None:
            return  # the client went away
        held: list[asyncio.Semaphore] = []
        # A relay's bundle is mostly log batches: it waits as a batch does, unless it is
        # one of heartbeats only (which the view holds it to).
        batch = match[1] == LOG_BATCH or (match[2] is not None and not _heartbeats_only(scope))
        wanted = [self.batch_slots, self.slots] if batch else [self.slots]
        try:
            async with asyncio.timeout(self.timeout_s):
                for semaphore in wanted:
                    await semaphore.acquire()
                    held.append(semaphore)
        except TimeoutError:
            for semaphore in held:
                semaphore.release()
            await _overloaded(send, self.timeout_s)
            return
        try:
            await self.app(scope, _replayed(body, receive), send)
        finally:
            for semaphore in held:
                semaphore.release()


def _heartbeats_only(scope: dict) -> bool:
    return scope.get("query_string", b"") == HEARTBEATS_QUERY


def _signed_token(scope: dict) -> bool:
    """Whether the request carries a runner token whose HMAC checks out. Only the signature:
    finding its attempt takes a pooled connection, which is what the slots ration."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return scheme.lower() == "bearer" and nonce_from(token.strip()) is not None
    return False


def _client_of(scope: dict) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


async def _read_body(receive: Callable) -> bytes | None:
    """The whole request body, or None when the client disconnects first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replayed(body: bytes, receive: Callable) -> Callable:
    """A `receive` that hands over `body` (read already) as the request's only message, then
    waits for the disconnect. Any later body the client sends is dropped: Django asks again
    only to learn of a disconnect, and an `http.request` there would be its error."""
    given = False

    async def replay() -> dict:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message

    return replay


def _without_body(receive: Callable) -> Callable:
    """For a request refused before its body matters: Django sees an empty one."""
    return _replayed(b"", receive)


_TOO_MANY = (
    "Too many runner requests from this address are still sending their bodies (at most {})."
    " Retry shortly."
)
_TOO_SLOW = "The request body did not arrive within {:g}s."


async def _refuse(
    send: Callable, status: int, error_type: str, message: str, *, close: bool = True
) -> None:
    body = json.dumps({"error": {"type": error_type, "message": message, "param": None}})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    if close:  # what is left of the request's body is never read
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body.encode()})


async def _overloaded(send: Callable, waited_s: float) -> None:
    message = (
        f"The control plane is busy: this request waited {waited_s:g}s for its turn. Retry shortly."
    )
    await _refuse(send, 503, OVERLOADED, message, close=False)


def admit_runner_requests(app: ASGIApp) -> RunnerAdmission:
    """`app` behind admission control with the settings' limit and wait."""
    from django.conf import settings

    return RunnerAdmission(
        app,
        limit=settings.RUNNER_MAX_CONCURRENT,
        timeout_s=settings.RUNNER_QUEUE_TIMEOUT_S,
        body_timeout_s=settings.RUNNER_BODY_TIMEOUT_S,
        max_pending_per_client=settings.RUNNER_MAX_PENDING_PER_CLIENT,
    )
