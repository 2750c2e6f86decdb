"""The runner's two background loops: `LogSender` ships spooled lines, `Heartbeat` posts
`started` and then heartbeats and passes the control plane's orders on.

Both retry while the control plane is away until they are stopped; a refusal (401/404,
409 superseded, 400 unsupported_protocol) calls `on_abort(exit_status, reason)` and ends
the loop.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.client import (
    ControlClient,
    FatalError,
    RetryStopped,
    SupersededError,
    log,
    refusal_status,
    retrying,
)
from runner.protocol import ORDER_CONTINUE
from runner.spool import Spool

# A request body stays well under the 2.5 MB a Django server accepts by default
# (DATA_UPLOAD_MAX_MEMORY_SIZE), even for a batch of 16,384-character lines.
MAX_BATCH_BYTES = 1_000_000
# Batches posted and not yet answered, at most: the control plane parses the next while it
# stores one, and the runner reads the spool meanwhile.
MAX_IN_FLIGHT = 2
SHIPPED_POLL_S = 0.02
THREAD_JOIN_TIMEOUT_S = 12.0  # a request in flight times out after 10 s


class LogSender:
    """Ships spooled lines: a batch holds at most `max_lines` (and `MAX_BATCH_BYTES` of
    JSON) and goes when it is full or `max_interval_s` after its first line was seen
    (gzipped from `gzip_min_bytes`, when the control plane asked for that);
    `flush_now()` sends without waiting. A line is acknowledged in the spool only after the
    control plane answered 200 for its batch.

    Retries forever until `stop()`; a refusal calls `on_abort(exit_status, reason)`; every
    batch's answer goes to `on_answer` (it carries the runner's order, like a heartbeat's).
    """

    def __init__(
        self,
        client: ControlClient,
        spool: Spool,
        *,
        max_lines: int,
        max_interval_s: float,
        on_abort: Callable[[int, str], None],
        gzip_min_bytes: int | None = None,
        on_answer: Callable[[dict], None] | None = None,
    ) -> None:
        self.client = client
        self.spool = spool
        self.max_lines = max_lines
        self.max_interval_s = max_interval_s
        self.gzip_min_bytes = gzip_min_bytes
        self.on_answer = on_answer
        self.on_abort = on_abort
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flush = False
        self._idle = True
        self._thread = threading.Thread(target=self._run, name="runner-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        """Called after lines were spooled; wakes the sender only when that matters, so a
        fast workload does not wake it once per line."""
        if self._idle or self.spool.pending >= self.max_lines:
            self._wake.set()

    def flush_now(self) -> None:
        self._flush = True
        self._wake.set()

    def spooled_seq(self) -> int:
        """The seq of the last line spooled so far."""
        return self.spool.last_seq

    def wait_shipped(self, seq: int, timeout: float) -> bool:
        """Send every line up to `seq` now and wait until the control plane acknowledged
        them (False when `timeout` passed or the sender stopped first)."""
        deadline = time.monotonic() + timeout
        while self.spool.acked_seq < seq:
            if self._stop.is_set() or time.monotonic() > deadline:
                return False
            self.flush_now()
            self._stop.wait(SHIPPED_POLL_S)
        return True

    def stop(self, timeout: float = THREAD_JOIN_TIMEOUT_S) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _wait(self, timeout: float) -> None:
        self._wake.wait(timeout)
        self._wake.clear()

    def _run(self) -> None:
        first_seen: float | None = None  # when the oldest line not yet sent was seen
        window: deque[_InFlight] = deque()  # batches posted and not yet settled, in seq order
        halt = _Halt(self._stop)
        while not self._stop.is_set():
            # Settle the batches that were answered, oldest first: acks go in seq order.
            while window and window[0].done.is_set():
                head = window.popleft()
                if head.outcome is None:
                    self.spool.ack(head.last_seq)
                    continue
                # A batch was not stored: the ones after it stop retrying and are
                # forgotten; all of them go again from the oldest line not acknowledged.
                halt.set()
                for later in window:
                    later.done.wait()
                window.clear()
                if isinstance(head.outcome, (SupersededError, FatalError)):
                    self.on_abort(refusal_status(head.outcome), str(head.outcome))
                    return
                if self._stop.is_set():
                    return
                if not isinstance(head.outcome, RetryStopped):  # a bug must not stop the logs
                    log(f"sending logs failed: {head.outcome!r}")
                    self._stop.wait(1.0)
                halt = _Halt(self._stop)
            sent = window[-1].last_seq if window else self.spool.acked_seq
            unsent = self.spool.last_seq - sent
            if unsent <= 0:
                first_seen = None
                if window:
                    self._wait(1.0)  # an answer wakes it
                    continue
                self._idle = True
                if self.spool.last_seq <= sent:  # a line may have come before _idle was set
                    self._wait(1.0)
                self._idle = False
                continue
            now = time.monotonic()
            if first_seen is None:
                first_seen = now
            due = first_seen + self.max_interval_s
            if len(window) >= MAX_IN_FLIGHT:
                self._wait(1.0)
                continue
            if unsent < self.max_lines and now < due and not self._flush:
                self._wait(due - now)
                continue
            batch = self.spool.unacked_raw(
                self.max_lines, MAX_BATCH_BYTES, after=sent if window else None
            )
            if not batch:  # the spool was closed
                self._wait(0.05)
                continue
            # A batch posted while another is in flight names that one's last seq: the
            # control plane stores it after that one, so lines keep their order.
            window.append(self._post(batch, window[-1].last_seq if window else None, halt))
            if len(batch) >= unsent:
                first_seen = None
            # else: lines seen before this send are left (the batch was cut by size); they
            # are due already, so the next batch goes at once when the window has room.

    def _post(self, batch: list[tuple[int, bytes]], follows: int | None, halt: _Halt) -> _InFlight:
        """Post `batch` in a thread of its own, retrying until it is answered or `halt` is
        set; the sender is woken when it is done."""
        flight = _InFlight(last_seq=batch[-1][0])
        lines = [raw for _, raw in batch]

        def post() -> None:
            try:
                answer = retrying(
                    lambda: self.client.post_log_lines(lines, follows, self.gzip_min_bytes),
                    stop=halt,
                )
            except BaseException as exc:  # handed to the loop, which decides
                flight.outcome = exc
            else:
                self._hand_over(answer)  # the batch is stored whatever happens there
            finally:
                flight.done.set()
                self._wake.set()

        threading.Thread(target=post, name="runner-sender-post", daemon=True).start()
        return flight

    def _hand_over(self, answer: dict) -> None:
        if self.on_answer is None:
            return
        try:
            self.on_answer(answer)
        except Exception as exc:  # a bug there must not make a stored batch go again
            log(f"handling the answer to a batch failed: {exc!r}")


@dataclass
class _InFlight:
    """A batch posted: the last seq it carries, and once `done`, None if it was stored or
    what stopped it."""

    last_seq: int
    done: threading.Event = field(default_factory=threading.Event)
    outcome: BaseException | None = None


class _Halt:
    """A stop for one round of sends: set by the sender's stop or by a failed batch."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._own = threading.Event()

    def set(self) -> None:
        self._own.set()

    def is_set(self) -> bool:
        return self._own.is_set() or self._stop.is_set()

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set() and (left := deadline - time.monotonic()) > 0:
            self._own.wait(min(left, 0.05))
        return self.is_set()


class Heartbeat:
    """Posts `started` once, then a heartbeat every `interval_s`; hands each answer's
    order to `on_order`, and each answer whole to `on_answer` (the shell sessions' hint).
    Retries forever until `stop()`; a refusal calls `on_abort`.

    A log batch's answer that carries an order is a heartbeat answer too (`heard`): the
    control plane counted the batch as a heartbeat, so no heartbeat is posted until
    `interval_s` has passed since the last one of either. A busy workload's runner then
    sends its batches and nothing else; a quiet one still beats every `interval_s`."""

    def __init__(
        self,
        client: ControlClient,
        *,
        pid: int,
        resumed_from_step: int | None = None,
        interval_s: float,
        last_seq: Callable[[], int],
        on_order: Callable[[str], None],
        on_abort: Callable[[int, str], None],
        on_answer: Callable[[dict], None] | None = None,
    ) -> None:
        self.client = client
        self.pid = pid
        self.resumed_from_step = resumed_from_step
        self.interval_s = interval_s
        self.last_seq = last_seq
        self.on_order = on_order
        self.on_abort = on_abort
        self.on_answer = on_answer
        self.started_acked = False
        self._next_beat = time.monotonic()  # put off by every answer, of either kind
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = THREAD_JOIN_TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            answer = retrying(
                lambda: self.client.post_started(self.pid, self.resumed_from_step),
                stop=self._stop,
            )
            self.started_acked = True
            self._put_off()
            self._obey(answer)
            self._hand_over(answer)
            while not self._stop.wait(self._until_due()):
                if self._until_due() > 0:  # a batch's answer came meanwhile
                    continue
                try:
                    answer = retrying(
                        lambda: self.client.post_heartbeat(self.last_seq()), stop=self._stop
                    )
                except (RetryStopped, SupersededError, FatalError):
                    raise
                except Exception as exc:  # a bug must not stop the heartbeats
                    log(f"heartbeat failed: {exc!r}")
                    self._put_off()  # the next try an interval on, not at once
                    continue
                self._put_off()
                self._obey(answer)
                self._hand_over(answer)
        except RetryStopped:
            return
        except (SupersededError, FatalError) as exc:
            self.on_abort(refusal_status(exc), str(exc))

    def heard(self, answer: dict) -> None:
        """A log batch was answered with `answer`: when it carries an order (the control
        plane counted the batch as a heartbeat), obey it and put the next heartbeat off."""
        if "order" not in answer or self._stop.is_set():  # an older control plane, or done
            return
        if self.started_acked:
            self._put_off()
        self._obey(answer)

    def _hand_over(self, answer: dict) -> None:
        if self.on_answer is None:
            return
        try:
            self.on_answer(answer)
        except Exception as exc:  # a bug there must not stop the heartbeats
            log(f"handling a heartbeat's answer failed: {exc!r}")

    def _put_off(self) -> None:
        self._next_beat = time.monotonic() + self.interval_s

    def _until_due(self) -> float:
        return max(0.0, self._next_beat - time.monotonic())

    def _obey(self, answer: dict) -> None:
        order = answer.get("order", ORDER_CONTINUE)
        if order != ORDER_CONTINUE:
            self.on_order(str(order))
