"""The on-disk spool: every log line goes to disk before it is sent.

`{dir}/spool.jsonl` holds one JSON object per line, exactly as sent, in seq order;
`{dir}/spool.acked` holds the highest seq the control plane has acknowledged. A control
plane that is away for minutes costs disk, not memory, and a runner restarted on the same
directory resumes after the acknowledged seq.

Durability is batched for throughput: each `append` hands its line to the OS (so a crash of
the runner loses nothing), and the file is fsynced at most every `fsync_interval_s` and on
`sync`/`close` (so a crash of the machine loses at most that long). `spool.acked` is
replaced atomically; losing an ack only means resending lines, which the control plane
stores once.

`unacked` never rescans the file: the spool remembers the byte offset just past the acked
line and caches the lines read beyond it, so each line is read from disk once.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import deque
from json.encoder import encode_basestring_ascii
from pathlib import Path

SPOOL_FILE = "spool.jsonl"
ACKED_FILE = "spool.acked"


def _seq_of(raw: bytes) -> int | None:
    """The seq of a spooled line, or None when it is not one. `append` writes `seq` first,
    so the common case needs no JSON parsing."""
    if raw.startswith(b'{"seq":'):
        end = raw.find(b",", 7)
        if end > 7:
            try:
                return int(raw[7:end])
            except ValueError:
                pass
    try:
        return int(json.loads(raw)["seq"])
    except (ValueError, KeyError, TypeError):
        return None


class Spool:
    """Append-only line store with an acknowledgement mark. Thread-safe.

    Lines must be appended in increasing `seq` order (the output collector appends under the
    lock that assigns seqs); `ack(seq)` may only acknowledge a seq that was appended.
    """

    def __init__(self, directory: Path | str, *, fsync_interval_s: float = 0.5) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / SPOOL_FILE
        self.acked_path = self.directory / ACKED_FILE
        self.fsync_interval_s = fsync_interval_s
        self._lock = threading.Lock()
        self._acked = self._read_acked()
        self._last_seq = 0
        # Offset just past the last acknowledged line, and the lines read beyond it that are
        # not acknowledged yet, each as (seq, its raw JSON bytes with the newline, the offset
        # just past it).
        self._ack_pos = 0
        self._cache: deque[tuple[int, bytes, int]] = deque()
        self._read_pos = 0
        self._recover()
        # Unbuffered: each append is one write(2), and a failed one can be undone whole
        # (a buffered writer would keep the failed bytes and write them later).
        self._writer = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held until close()
        self._write_pos = self.path.stat().st_size
        self._reader = open(self.path, "rb")  # noqa: SIM115 - held until close()
        self._last_fsync = time.monotonic()
        self._dirty = False
        self._closed = False

    def _read_acked(self) -> int:
        try:
            return max(int(self.acked_path.read_text().strip() or 0), 0)
        except (OSError, ValueError):
            return 0

    def _recover(self) -> None:
        """Find the acked line's offset and the last seq; drop a torn last line.

        Runs once, at open: the only full scan of the file.
        """
        if not self.path.exists():
            return
        good_end = 0
        with open(self.path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                seq = _seq_of(raw)
                if seq is None:
                    break
                good_end += len(raw)
                self._last_seq = seq
                if seq <= self._acked:
                    self._ack_pos = good_end
        if good_end != self.path.stat().st_size:
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
        self._acked = min(self._acked, self._last_seq)
        self._read_pos = self._ack_pos

    @property
    def last_seq(self) -> int:
        """The highest seq appended (including by an earlier runner on this directory)."""
        return self._last_seq

    @property
    def acked_seq(self) -> int:
        """The highest seq acknowledged."""
        return self._acked

    @property
    def pending(self) -> int:
        """How many lines are not acknowledged (seqs are contiguous, so a subtraction)."""
        return self._last_seq - self._acked

    def append(self, line: dict) -> None:
        """Write one line (a dict with an int `seq` above `last_seq`) and hand it to the OS.

        Raises OSError (disk full) with the file as it was before: no torn line is left.
        """
        self.append_many([line])

    def append_many(self, lines: list[dict]) -> None:
        """Write `lines` (dicts with int `seq`s, consecutive and above `last_seq`) with one
        write(2): a fast workload's read of many lines costs one system call, not one each.

        Raises OSError (disk full) with the file as it was before: none of them is written.
        """
        if not lines:
            return
        # ASCII JSON: any string (even a lone surrogate) round-trips, and no line is torn
        # into invalid UTF-8. Its size is also an upper bound of the line's size in a
        # UTF-8 request body, which `unacked(max_bytes=...)` relies on.
        dumps = json.dumps
        data = "".join([dumps(line, separators=(",", ":")) + "\n" for line in lines])
        self._write(data.encode("ascii"), lines[-1]["seq"])

    def append_messages(
        self, first_seq: int, ts: str, source: str, stream: str, messages: list[str]
    ) -> None:
        """As `append_many` of `{"seq", "ts", "source", "stream", "message"}` dicts, one per
        message from `first_seq` on, all with this `ts`, `source` and `stream`, written to
        the same bytes without making the dicts: the output collector's hot path."""
        if not messages:
            return
        escape = encode_basestring_ascii  # json.dumps's own escaper for ASCII output
        shared = f',"ts":{escape(ts)},"source":{escape(source)},"stream":{escape(stream)}'
        shared += ',"message":'
        data = "".join(
            [
                f'{{"seq":{seq}{shared}{escape(message)}}}\n'
                for seq, message in enumerate(messages, start=first_seq)
            ]
        )
        self._write(data.encode("ascii"), first_seq + len(messages) - 1)

    def _write(self, data: bytes, last_seq: int) -> None:
        """Append `data` (whole lines, the last of them `last_seq`) with one write(2); on
        OSError the file is cut back to where it was. fsyncs at most every interval."""
        with self._lock:
            if self._closed:
                raise ValueError("the spool is closed")
            try:
                written = self._writer.write(data)
                while written < len(data):  # a regular file takes it all, but be sure
                    written += self._writer.write(data[written:])
            except OSError:
                os.ftruncate(self._writer.fileno(), self._write_pos)
                raise
            self._write_pos += len(data)
            self._last_seq = last_seq
            self._dirty = True
            now = time.monotonic()
            if now - self._last_fsync >= self.fsync_interval_s:
                os.fsync(self._writer.fileno())
                self._last_fsync = now
                self._dirty = False

    def unacked(self, limit: int, max_bytes: int | None = None) -> list[dict]:
        """The first lines after the acknowledged seq, in seq order: at most `limit`, and
        (when given) at most `max_bytes` of spooled JSON, but always at least one line."""
        return [json.loads(raw) for _, raw in self.unacked_raw(limit, max_bytes)]

    def unacked_raw(
        self, limit: int, max_bytes: int | None = None, *, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        """As `unacked`, but each line as (seq, its JSON bytes without the newline), not
        parsed; with `after`, the lines after that seq (a batch that follows one still in
        flight)."""
        with self._lock:
            if self._closed:
                return []
            skip = 0
            if after is not None:
                skip = sum(1 for seq, _, _ in self._cache if seq <= after)
            wanted = skip + limit
            if len(self._cache) < wanted and self._read_pos < self._write_pos:
                self._reader.seek(self._read_pos)
                while len(self._cache) < wanted and self._read_pos < self._write_pos:
                    raw = self._reader.readline()
                    if not raw.endswith(b"\n"):
                        break  # cannot happen under the lock; never hand out half a line
                    self._read_pos += len(raw)
                    seq = _seq_of(raw)
                    if seq is None:
                        break  # not a line this spool wrote; never hand it out
                    self._cache.append((seq, raw, self._read_pos))
                    if after is not None and seq <= after:
                        skip += 1
                        wanted += 1
            lines: list[tuple[int, bytes]] = []
            total = 0
            for seq, raw, _ in itertools.islice(self._cache, skip, None):
                total += len(raw)
                if len(lines) >= limit or (lines and max_bytes is not None and total > max_bytes):
                    break
                lines.append((seq, raw[:-1]))
            return lines

    def ack(self, seq: int) -> None:
        """Record that every line up to `seq` is acknowledged, durably and atomically."""
        with self._lock:
            if seq <= self._acked or self._closed:
                return
            while self._cache and self._cache[0][0] <= seq:
                _, _, self._ack_pos = self._cache.popleft()
            if not self._cache and self._read_pos < self._write_pos:
                # An ack beyond what was read (not done by the runner): skip forward.
                self._reader.seek(self._read_pos)
                while self._read_pos < self._write_pos:
                    raw = self._reader.readline()
                    line_seq = _seq_of(raw)
                    if line_seq is not None and line_seq > seq:
                        self._read_pos += len(raw)
                        self._cache.append((line_seq, raw, self._read_pos))
                        break
                    self._read_pos += len(raw)
                    self._ack_pos = self._read_pos
            self._acked = seq
            tmp = self.acked_path.with_name(ACKED_FILE + ".tmp")
            tmp.write_text(f"{seq}\n")
            os.replace(tmp, self.acked_path)

    def sync(self) -> None:
        """fsync what was appended, if anything is pending."""
        with self._lock:
            if self._dirty and not self._closed:
                os.fsync(self._writer.fileno())
                self._last_fsync = time.monotonic()
                self._dirty = False

    def close(self) -> None:
        """fsync and close the files. Idempotent."""
        self.sync()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writer.close()
            self._reader.close()
