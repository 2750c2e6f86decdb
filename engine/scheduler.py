"""The scheduler thread: the only thread that touches the model.

Handlers `submit` a `Request` and read its `events` (`Delta`, then one `Finished`, `Aborted`
or `Failed`). The thread takes up to `max_batch` waiting requests at once, after a gather
window of a few milliseconds counted from the oldest one's arrival (so requests sent together
share a batch), and decodes them together until every row is finished or cancelled; requests
that arrive meanwhile wait for the next batch (static batching). Adapter loads and deletions
are `call`ed: they run on this thread between batches, so no forward pass ever sees the set of
adapters change under it.

A request ends exactly once (`Request.end`), by whoever gets there first: its row finishing,
its client hanging up (`cancel`, from the handler's thread), or the engine stopping.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ApiError
from engine.params import Sampling

GATHER_S = 0.005


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Finished:
    reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Aborted:
    """The engine is stopping."""

    message: str


@dataclass(frozen=True)
class Failed:
    """Generation raised; the traceback is on stderr."""

    message: str


@dataclass(eq=False)
class Request:
    adapter: str | None  # None: the base model
    prompt_ids: list[int]
    sampling: Sampling
    stop_token_ids: frozenset[int]  # end the row (finish "stop") unless sampling.ignore_eos
    hidden_stops: tuple[str, ...]  # stop strings of the engine's own (chat's `<|im_end|>`)
    on_end: Callable[[bool], None]  # called once with `cancelled`, when the request ends
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    arrived: float = field(default_factory=time.monotonic)
    finished: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def emit(self, text: str) -> None:
        if text and not self.finished:
            self.events.put(Delta(text))

    def end(self, event: Any, *, cancelled: bool = False) -> bool:
        """End the request with `event`; False (and nothing done) if it had ended already."""
        with self._lock:
            if self.finished:
                return False
            self.finished = True
        self.events.put(event)
        self.on_end(cancelled)
        return True

    def cancel(self) -> bool:
        """The client went away: stop generating for it (its row is dropped at the next step)."""
        return self.end(Aborted("cancelled"), cancelled=True)


class Scheduler:
    def __init__(self, model: Any, *, max_batch: int, on_batch: Callable[[int], None]) -> None:
        self._model = model
        self._max_batch = max_batch
        self._on_batch = on_batch
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._commands: deque[tuple[Callable[[], Any], Future]] = deque()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def submit(self, request: Request) -> None:
        """Queue `request`; 503 `shutting_down` once the engine is stopping (the request is
        then not queued and not ended: the caller ends it)."""
        with self._cond:
            if self._stopping:
                raise ApiError(503, "shutting_down", "the engine is shutting down")
            self._waiting.append(request)
            self._cond.notify()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the scheduler thread before the next batch; its result or exception."""
        future: Future = Future()
        with self._cond:
            if self._stopping:
                future.set_exception(ApiError(503, "shutting_down", "the engine is shutting down"))
                return future
            self._commands.append((fn, future))
            self._cond.notify()
        return future

    def stop(self, timeout: float) -> None:
        """Stop after the current decode step; every request not finished is `Aborted`."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            leftover = [*self._waiting, *self._running]
            commands = list(self._commands)
            self._waiting.clear()
            self._commands.clear()
        for request in leftover:
            request.end(Aborted("the engine is shutting down"))
        for _, future in commands:
            future.cancel()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._commands or self._live_waiting()):
                    self._cond.wait()
                if self._stopping:
                    return
                commands = list(self._commands)
                self._commands.clear()
            for fn, future in commands:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as error:
                        future.set_exception(error)
            batch = self._take()
            if batch:
                self._decode(batch)

    def _live_waiting(self) -> bool:
        while self._waiting and self._waiting[0].finished:  # cancelled while waiting
            self._waiting.popleft()
        return bool(self._waiting)

    def _take(self) -> list[Request]:
        with self._cond:
            if not self._live_waiting():
                return []
            deadline = self._waiting[0].arrived + GATHER_S
            while (
                len(self._waiting) < self._max_batch
                and not self._stopping
                and (remaining := deadline - time.monotonic()) > 0
            ):
                self._cond.wait(remaining)
            batch: list[Request] = []
            while self._waiting and len(batch) < self._max_batch:
                request = self._waiting.popleft()
                if not request.finished:
                    batch.append(request)
            self._running = batch
            return batch

    def _decode(self, batch: list[Request]) -> None:
        self._on_batch(len(batch))
        try:
            self._model.generate(batch, should_stop=lambda: self._stopping)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            for request in batch:
                request.end(Failed("generation failed; the engine's log has the traceback"))
        finally:
            with self._cond:
                self._running = []
        for request in batch:  # left unfinished only when the engine is stopping
            request.end(Aborted("the engine is shutting down"))
