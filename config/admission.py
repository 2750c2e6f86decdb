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
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable

from runner.protocol import RELAY_HEARTBEATS_QUERY

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
RUNNER_PROTOCOL = re.compile(
    r"^/api/v1/runner/(?:jobs/[^/]+/(spec|started|heartbeat|logs|exit)|(relay))/?$"
)
LOG_BATCH = "logs"
HEARTBEATS_QUERY = RELAY_HEARTBEATS_QUERY.encode()
OVERLOADED = "overloaded"
RETRY_AFTER_S = 1


class RunnerAdmission:
    """The ASGI wrapper: `limit` runner requests at a time (log batches: `limit - 1` at
    most), each waiting at most `timeout_s` for its turn. One per process; its semaphores
    belong to the event loop that first uses them (uvicorn runs one loop per process)."""

    def __init__(self, app: ASGIApp, *, limit: int, timeout_s: float) -> None:
        self.app = app
        self.limit = max(2, limit)
        self.timeout_s = timeout_s
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
            await self.app(scope, receive, send)
        finally:
            for semaphore in held:
                semaphore.release()


def _heartbeats_only(scope: dict) -> bool:
    return scope.get("query_string", b"") == HEARTBEATS_QUERY


async def _overloaded(send: Callable, waited_s: float) -> None:
    message = (
        f"The control plane is busy: this request waited {waited_s:g}s for its turn. Retry shortly."
    )
    body = json.dumps({"error": {"type": OVERLOADED, "message": message, "param": None}})
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


def admit_runner_requests(app: ASGIApp) -> RunnerAdmission:
    """`app` behind admission control with the settings' limit and wait."""
    from django.conf import settings

    return RunnerAdmission(
        app, limit=settings.RUNNER_MAX_CONCURRENT, timeout_s=settings.RUNNER_QUEUE_TIMEOUT_S
    )
