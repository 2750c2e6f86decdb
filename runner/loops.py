"""The runner's two background loops: `LogSender` ships spooled lines, `Heartbeat` posts
`started` and then heartbeats and passes the control plane's orders on.

Both retry while the control plane is away until they are stopped; a refusal (401/404,
409 superseded, 400 unsupported_protocol) calls `on_abort(exit_status, reason)` and ends
the loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
SHIPPED_POLL_S = 0.02
THREAD_JOIN_TIMEOUT_S = 12.0  # a request in flight times out after 10 s


class LogSender:
    """Ships spooled lines: a batch holds at most `max_lines` (and `MAX_BATCH_BYTES` of
    JSON) and goes when it is full or `max_interval_s` after its first line was seen;
    `flush_now()` sends without waiting. A line is acknowledged in the spool only after the
    control plane answered 200 for its batch.

    Retries forever until `stop()`; a refusal calls `on_abort(exit_status, reason)`.
    """

    def __init__(
        self,
        client: ControlClient,
        spool: Spool,
        *,
        max_lines: int,
        max_interval_s: float,
        on_abort: Callable[[int, str], None],
    ) -> None:
        self.client = client
        self.spool = spool
        self.max_lines = max_lines
        self.max_interval_s = max_interval_s
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
        first_seen: float | None = None
        while not self._stop.is_set():
            pending = self.spool.pending
            if pending <= 0:
                first_seen = None
                self._idle = True
                if self.spool.pending <= 0:  # a line may have come before _idle was set
                    self._wait(1.0)
                self._idle = False
                continue
            now = time.monotonic()
            if first_seen is None:
                first_seen = now
            due = first_seen + self.max_interval_s
            if pending < self.max_lines and now < due and not self._flush:
                self._wait(due - now)
                continue
            batches = [self.spool.unacked_raw(self.max_lines, MAX_BATCH_BYTES)]
            if pending > len(batches[0]):
                # A backlog: the next batch goes at once beside it, so the control plane
                # parses one while it stores the other.
                after = batches[0][-1][0]
                follow = self.spool.unacked_raw(self.max_lines, MAX_BATCH_BYTES, after=after)
                if follow:
                    batches.append(follow)
            outcomes = self._send(batches)
            stored = 0
            for batch, outcome in zip(batches, outcomes, strict=True):
                if outcome is not None:
                    break  # acks go in order: a later batch stored now is stored again
                self.spool.ack(batch[-1][0])
                stored += len(batch)
            refused = [o for o in outcomes if isinstance(o, (SupersededError, FatalError))]
            if refused:
                self.on_abort(refusal_status(refused[0]), str(refused[0]))
                return
            if self._stop.is_set():
                return
            failed = [o for o in outcomes if o is not None and not isinstance(o, RetryStopped)]
            if failed:  # a bug must not silently stop the logs
                log(f"sending logs failed: {failed[0]!r}")
                self._stop.wait(1.0)
            elif stored >= pending:
                first_seen = None
            # else: lines seen before this send are left (the batch was cut by size, or a
            # batch was not stored); they are due already, so the next batch goes at once.

    def _send(self, batches: list[list[tuple[int, bytes]]]) -> list[BaseException | None]:
        """Post the batches, the second (if any) in a thread of its own and marked as
        following the first; each retries until it is answered or the sender stops. Returns
        None for each batch stored, else what stopped it."""
        halt = _Halt(self._stop)

        def post(batch, follows=None) -> BaseException | None:
            lines = [raw for _, raw in batch]
            try:
                retrying(lambda: self.client.post_log_lines(lines, follows), stop=halt)
            except BaseException as exc:  # handed to the loop, which decides
                halt.set()  # the other batch stops retrying: it will be sent again
                return exc
            return None

        if len(batches) == 1:
            return [post(batches[0])]
        second: list[BaseException | None] = []
        thread = threading.Thread(
            target=lambda: second.append(post(batches[1], batches[0][-1][0])),
            name="runner-sender-2",
            daemon=True,
        )
        thread.start()
        first = post(batches[0])
        thread.join()
        return [first, second[0] if second else RetryStopped()]


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
    order to `on_order`. Retries forever until `stop()`; a refusal calls `on_abort`."""

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
    ) -> None:
        self.client = client
        self.pid = pid
        self.resumed_from_step = resumed_from_step
        self.interval_s = interval_s
        self.last_seq = last_seq
        self.on_order = on_order
        self.on_abort = on_abort
        self.started_acked = False
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
            self._obey(answer)
            while not self._stop.wait(self.interval_s):
                try:
                    answer = retrying(
                        lambda: self.client.post_heartbeat(self.last_seq()), stop=self._stop
                    )
                except (RetryStopped, SupersededError, FatalError):
                    raise
                except Exception as exc:  # a bug must not stop the heartbeats
                    log(f"heartbeat failed: {exc!r}")
                    continue
                self._obey(answer)
        except RetryStopped:
            return
        except (SupersededError, FatalError) as exc:
            self.on_abort(refusal_status(exc), str(exc))

    def _obey(self, answer: dict) -> None:
        order = answer.get("order", ORDER_CONTINUE)
        if order != ORDER_CONTINUE:
            self.on_order(str(order))
