"""The workload's output, turned into numbered, masked log lines in the spool.

One reader thread per pipe (`start_reader`) reads raw bytes with `os.read`, so it never
holds a lock a shutdown could trip over, and joins what successive `write()` calls of the
workload sent until a newline arrives. For each line:

- the trailing `\\n` or `\\r\\n` is stripped, and the bytes decoded as UTF-8 with replacement
  (incrementally, so a character split between two reads decodes whole);
- the masker runs on the whole line *before* it is cut into pieces of at most
  `MAX_MESSAGE_CHARS` characters, so a secret across a cut is still masked;
- a line longer than the read buffer (`read_chunk_bytes`, 64 KiB) is not held in memory
  whole: its text is masked as it arrives, holding back the last `max_form_len - 1`
  characters (at least one, for a `\\r` that may precede the `\\n`) until more text shows
  whether a secret continues there, and full pieces are emitted as soon as they exist;
- seq numbers are assigned under one lock, in the order lines are complete (stdout and
  stderr interleaved as they arrive), and each line is stamped and appended to the spool
  under that same lock, so the spool is in seq order.

`system(message)` adds the runner's own lines (source `system`, stream `stdout`) to the same
sequence. After `close()` nothing more is spooled, so the last seq is final.

`on_stdout_line` (optional) sees the text of each complete stdout line of the workload, before
masking, after the line was spooled (the artifact uploader looks for its JSON lines there).
A line longer than the read buffer is not shown to it.
"""

from __future__ import annotations

import codecs
import datetime
import os
import sys
import threading
import time
from collections.abc import Callable

from runner.masking import Masker
from runner.protocol import (
    MAX_MESSAGE_CHARS,
    SOURCE_SYSTEM,
    SOURCE_USER,
    STREAM_STDOUT,
)
from runner.spool import Spool

READ_CHUNK_BYTES = 65536


def _warn(message: str) -> None:
    print(f"runner: {message}", file=sys.stderr, flush=True)


def utc_now_iso() -> str:
    """The current UTC time as ISO 8601 with microseconds and a `Z`."""
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - datetime.UTC is 3.11+
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """`text` cut into pieces of at most `limit` characters, in order; `[""]` for `""`."""
    if len(text) <= limit:
        return [text]
    return [text[i : i + limit] for i in range(0, len(text), limit)]


class _LongLine:
    """The state of a line that arrived in more than one read."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.raw_tail = ""  # decoded, not yet masked
        self.masked = ""  # masked, not yet emitted
        self.emitted = False  # a piece of this line was emitted already


class OutputCollector:
    """Numbers, masks, stamps and spools lines from the workload's pipes and the runner.

    `notify` (optional) is called after lines were spooled, outside the lock, so a sender
    can wake up.
    """

    def __init__(
        self,
        spool: Spool,
        masker: Masker,
        *,
        notify: Callable[[], object] | None = None,
        on_stdout_line: Callable[[str], object] | None = None,
        max_message_chars: int = MAX_MESSAGE_CHARS,
        read_chunk_bytes: int = READ_CHUNK_BYTES,
    ) -> None:
        self.spool = spool
        self.masker = masker
        self.notify = notify
        self.on_stdout_line = on_stdout_line
        self.max_message_chars = max_message_chars
        self.read_chunk_bytes = read_chunk_bytes
        self._hold_back = max(masker.max_form_len - 1, 1)
        self._lock = threading.Lock()
        self._seq = spool.last_seq
        self._closed = False
        self._lost = 0
        self._threads: list[threading.Thread] = []

    @property
    def last_seq(self) -> int:
        """The highest seq assigned so far."""
        return self._seq

    # -- numbering ---------------------------------------------------------------------

    def _emit(self, source: str, stream: str, messages: list[str]) -> None:
        """Spool `messages` as consecutive lines. Dropped after `close()`."""
        if not messages:
            return
        with self._lock:
            if self._closed:
                return
            try:
                self.spool.append_messages(self._seq + 1, utc_now_iso(), source, stream, messages)
            except (OSError, ValueError) as exc:
                before = self._lost
                self._lost += len(messages)
                if before == 0 or before // 1000 != self._lost // 1000:
                    _warn(
                        f"could not spool {len(messages)} line(s) ({self._lost} lost so far): {exc}"
                    )
                return
            self._seq += len(messages)
        if self.notify is not None:
            self.notify()

    def system(self, message: str) -> None:
        """Spool one of the runner's own lines (masked too: a command may carry a secret)."""
        clean = message.encode("utf-8", "replace").decode("utf-8")
        for line in clean.splitlines() or [""]:
            masked = self.masker.mask(line)
            self._emit(SOURCE_SYSTEM, STREAM_STDOUT, split_message(masked, self.max_message_chars))

    def close(self) -> None:
        """Stop spooling: lines that arrive later (a lingering grandchild's) are dropped."""
        with self._lock:
            self._closed = True

    # -- readers -----------------------------------------------------------------------

    def start_reader(self, pipe, stream: str) -> threading.Thread:
        """Start a daemon thread reading `pipe` (a binary file object or an fd) to EOF."""
        fd = pipe if isinstance(pipe, int) else pipe.fileno()
        thread = threading.Thread(
            target=self.read_fd, args=(fd, stream), name=f"runner-{stream}", daemon=True
        )
        thread.start()
        self._threads.append(thread)
        return thread

    def join_readers(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds in all for the readers; True when all ended.

        A reader can outlive the workload when a process it started keeps the pipe open.
        """
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        return not any(thread.is_alive() for thread in self._threads)

    def read_fd(self, fd: int, stream: str) -> None:
        """Read `fd` to EOF, spooling every line. Runs in a reader thread."""
        buf = bytearray()
        long_line: _LongLine | None = None
        while True:
            try:
                data = os.read(fd, self.read_chunk_bytes)
            except InterruptedError:  # pragma: no cover - PEP 475 retries already
                continue
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            start = 0
            complete: list[bytes] = []
            while True:
                newline = buf.find(b"\n", start)
                if newline < 0:
                    break
                raw = bytes(buf[start:newline])
                start = newline + 1
                if long_line is not None:  # only the first line of a read can end one
                    state, long_line = long_line, None
                    self._guarded(self._feed, stream, state, raw, final=True)
                else:
                    complete.append(raw)
            if complete and not self._guarded(self._complete_lines, stream, complete):
                for raw in complete:  # find the one line that fails; keep the others
                    self._guarded(self._complete_lines, stream, [raw])
            del buf[:start]
            if len(buf) >= self.read_chunk_bytes:
                long_line = long_line or _LongLine()
                if not self._guarded(self._feed, stream, long_line, bytes(buf), final=False):
                    long_line = None
                buf.clear()
        if buf or long_line is not None:
            # Output that ended without a newline is still a line.
            self._guarded(self._feed, stream, long_line or _LongLine(), bytes(buf), final=True)

    def _guarded(self, fn: Callable[..., None], *args: object, **kwargs: object) -> bool:
        """Run `fn`; a bug must not stop the reader, or the workload would block on a
        full pipe. False when it failed (the line is lost)."""
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            _warn(f"could not process a line of output: {exc!r}")
            return False
        return True

    def _complete_lines(self, stream: str, raws: list[bytes]) -> None:
        """Spool the lines of one read together: one timestamp, one lock, one write. Each is
        decoded and masked before any is spooled, so a failure spools none of them."""
        texts = []
        messages: list[str] = []
        for raw in raws:
            text = raw.decode("utf-8", "replace")
            if text.endswith("\r"):
                text = text[:-1]
            texts.append(text)
            messages += split_message(self.masker.mask(text), self.max_message_chars)
        self._emit(SOURCE_USER, stream, messages)
        if self.on_stdout_line is not None and stream == STREAM_STDOUT:
            for text in texts:
                self._guarded(self.on_stdout_line, text)

    def _feed(self, stream: str, state: _LongLine, raw: bytes, *, final: bool) -> None:
        """Add the next bytes of a long line; with `final`, they end it."""
        text = state.raw_tail + state.decoder.decode(raw, final)
        if final:
            if text.endswith("\r"):
                text = text[:-1]
            state.masked += self.masker.mask(text)
            state.raw_tail = ""
        else:
            cut = len(text) - self._hold_back
            if cut <= 0:
                state.raw_tail = text
                return
            masked, consumed = self.masker.mask_prefix(text, cut)
            state.masked += masked
            state.raw_tail = text[consumed:]
        limit = self.max_message_chars
        if final:
            count = len(state.masked) // limit
            if len(state.masked) % limit or not (count or state.emitted):
                count += 1
        else:
            count = len(state.masked) // limit
        if count:
            pieces = [state.masked[i * limit : (i + 1) * limit] for i in range(count)]
            state.masked = state.masked[count * limit :]
            state.emitted = True
            self._emit(SOURCE_USER, stream, pieces)
