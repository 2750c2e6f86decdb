"""An ended job's whole log as one gzip file, so `logs.txt` re-reads it at file speed.

A running job's `logs.txt` is read from PostgreSQL in chunks (`read_chunk`). Once a job ends
its log no longer changes, apart from rare late lines (a runner's last flush inside its
token's grace, a system line), so it is written out once:

- **When.** The terminal transition (`services.job_transition`) sends `jobs.archive_log` on
  commit. A `logs.txt` read that finds the archive missing or stale asks again
  (`request_build`); those asks coalesce in Redis (`PENDING_KEY`, cleared when a build
  ends, at most `PENDING_TTL_S`), so a popular log does not queue a build per read.
- **What.** Exactly the bytes `logs.txt` serves without `?source`: every line of every
  source in log order (attempt, position, id; see `LogLine`), one message a line, read with
  the same `read_chunk` in `CHUNK_LINES` chunks
  and compressed by the same level-1 gzip compressor (`gzip_compressor`), so memory stays
  flat however long the log, and the file can go out as `Content-Encoding: gzip` as it is.
  It is built in a local temporary file first and then saved to the default storage
  (`STORAGES["default"]`: the filesystem under MEDIA_ROOT, or S3) as
  `logs/<job public id>.log.gz`; the storage never overwrites, so a rebuild gets a free
  name beside the old one.
- **Trust.** Only the Job's row says an archive exists: `log_archive_name`,
  `log_archive_last_id` (the highest LogLine id in it) and `log_archive_lines` (how many
  lines), written under the job's row lock after the file is complete, so a reader never
  sees half a file. `current_archive` serves it only while the job is terminal, the line
  counters (kept in the same transaction as every insert) equal `log_archive_lines`, and
  `SELECT max(id)` for the job (one index probe) equals `log_archive_last_id`. A late
  line fails that check, and the read comes from the database again, complete; a line with
  a lower id that committed after a higher one was read fails the count check.
- **Twice.** `build` is idempotent: when the recorded archive still matches and its file
  exists it writes nothing. Two builds racing both write a file; the row keeps the one with
  more lines (or the one recorded first) and the other file is deleted after commit, as is
  the file an archive replaces. A reader streaming a replaced file keeps its open handle
  (POSIX unlink, an S3 GET in flight); one that finds the file gone falls back to the
  database.
- **Deleting a job.** Trainyard's code never deletes jobs (there is no `DELETE` in the API);
  only the Django admin's delete or the cascade of deleting an organization or project
  would, and then the archive's file stays behind in storage, as artifacts' files do.
"""

from __future__ import annotations

import logging
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import suppress
from typing import IO, NamedTuple

import redis
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.db.models import Max

from apps.core.redis_client import shared_redis
from apps.core.stored_files import StoredFileMissing, open_stream
from apps.core.transactions import after_commit
from apps.jobs import enqueue
from apps.jobs.models import Job, LogLine

logger = logging.getLogger(__name__)

CHUNK_LINES = 50_000
# Compressed bytes read from the stored file at a time when serving it.
READ_BYTES = 256 * 1024
# Decompressed bytes yielded at most at a time, for a client that does not take gzip.
INFLATED_BYTES = 4 * 1024 * 1024
PENDING_KEY = "trainyard:log_archive:pending:{job_id}"
PENDING_TTL_S = 600


# A place in a log's reading order: (attempt, position, id), as `LogLine.LOG_ORDER`.
LogKey = tuple[int, int, int]


class Chunk(NamedTuple):
    after: LogKey | None  # the place of its last line (the `after` it was read from, at the end)
    last_id: int  # the highest id among its lines (0 past the end)
    lines: int
    body: bytes  # one message a line, UTF-8; b"" past the end


def read_chunk(
    job_id: int, source: str | None, after: LogKey | None, limit: int | None = None
) -> Chunk:
    """The next `limit` (CHUNK_LINES) messages after the place `after` (from the start when
    None), of one source or all, in log order (attempt, position, id; see `LogLine`), so a
    batch stored late still reads in its seqs' place. PostgreSQL joins the chunk itself (one
    string rather than a row object per line); SQLite joins it here."""
    limit = limit or CHUNK_LINES
    if connection.vendor != "postgresql":
        lines = LogLine.objects.filter(job_id=job_id)
        if source:
            lines = lines.filter(source=source)
        mark = None
        if after is not None:
            mark = LogLine(attempt=after[0], id=after[2])
            mark.log_position = after[1]
        ordered = lines.in_log_order().beyond(mark)
        rows = list(ordered.values_list("attempt", "log_position", "id", "message")[:limit])
        if not rows:
            return Chunk(after, 0, 0, b"")
        body = ("\n".join(row[3] for row in rows) + "\n").encode()
        return Chunk(tuple(rows[-1][:3]), max(row[2] for row in rows), len(rows), body)
    table = LogLine._meta.db_table
    position = "COALESCE(seq, after_seq, 0)"
    where = "job_id = %s"
    params: list = [job_id]
    if after is not None:
        where += f" AND (attempt, {position}, id) > (%s, %s, %s)"
        params += list(after)
    if source:
        where += " AND source = %s"
        params.append(source)
    params.append(limit)
    order = "attempt {0}, pos {0}, id {0}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (array_agg(attempt ORDER BY {order.format('DESC')}))[1], "
            f"(array_agg(pos ORDER BY {order.format('DESC')}))[1], "
            f"(array_agg(id ORDER BY {order.format('DESC')}))[1], max(id), count(*), "
            f"string_agg(message, E'\\n' ORDER BY {order.format('')}) FROM "
            f"(SELECT attempt, {position} AS pos, id, message FROM {table} WHERE {where} "
            f"ORDER BY attempt, {position}, id LIMIT %s) AS chunk",
            params,
        )
        attempt, pos, line_id, last_id, count, text = cursor.fetchone()
    if last_id is None:
        return Chunk(after, 0, 0, b"")
    return Chunk((attempt, pos, line_id), last_id, count, (text + "\n").encode("utf-8", "replace"))


def gzip_compressor():
    """Level 1 (logs compress well even so, and a stream is not held up by the CPU), in the
    gzip container (wbits 31), so the bytes can be sent as `Content-Encoding: gzip`."""
    return zlib.compressobj(1, zlib.DEFLATED, 31)


def archive_path(job: Job) -> str:
    return f"logs/{job.public_id}.log.gz"


def last_log_id(job_id: int) -> int:
    """The job's highest LogLine id, 0 when it has none (the (job, id) index answers)."""
    return LogLine.objects.filter(job_id=job_id).aggregate(last=Max("id"))["last"] or 0


def current_archive(job: Job) -> str | None:
    """The storage name of the job's archive when it holds the job's whole log as it is now;
    None when the job has not ended, has no archive, or a line came after it. One query."""
    if not job.is_terminal or not job.log_archive_name or job.log_archive_last_id is None:
        return None
    if job.log_archive_lines != job.user_log_lines + job.system_log_lines:
        return None
    if last_log_id(job.pk) != job.log_archive_last_id:
        return None
    return job.log_archive_name


def open_archive(name: str) -> IO[bytes] | None:
    """The stored archive as a binary stream (close it), or None when its file is gone or
    the storage does not answer (the caller reads the database instead)."""
    try:
        return open_stream(name)
    except StoredFileMissing:
        logger.warning("log archive %s is recorded but missing from storage", name)
    except Exception:
        logger.warning("log archive %s could not be opened", name, exc_info=True)
    return None


def read_blocks(stream: IO[bytes], *, decompress: bool) -> Iterator[bytes]:
    """The archive's bytes in blocks of READ_BYTES, as stored (gzip), or decompressed in
    blocks of at most INFLATED_BYTES (a log of one line repeated inflates a hundredfold)."""
    if not decompress:
        while block := stream.read(READ_BYTES):
            yield block
        return
    inflater = zlib.decompressobj(31)
    while block := stream.read(READ_BYTES):
        while block:
            if data := inflater.decompress(block, INFLATED_BYTES):
                yield data
            block = inflater.unconsumed_tail
    if tail := inflater.flush():
        yield tail


def request_build(job_id: int) -> None:
    """Ask for the job's archive to be (re)built, unless an ask is already pending. A Redis
    that does not answer sends it anyway: a build too many is harmless."""
    try:
        send = shared_redis().set(PENDING_KEY.format(job_id=job_id), 1, nx=True, ex=PENDING_TTL_S)
    except redis.RedisError:
        send = True
    if send:
        enqueue.archive_log_now(job_id)


def _write(job: Job) -> tuple[str, int, int]:
    """Write the job's log to storage as one gzip file; (storage name, last id, lines)."""
    after, last_id, lines = None, 0, 0
    compressor = gzip_compressor()
    with tempfile.TemporaryFile() as spool:
        while True:
            chunk = read_chunk(job.pk, None, after)
            if not chunk.body:
                break
            after, lines = chunk.after, lines + chunk.lines
            last_id = max(last_id, chunk.last_id)
            spool.write(compressor.compress(chunk.body))
        spool.write(compressor.flush())
        spool.seek(0)
        name = default_storage.save(archive_path(job), File(spool, name=archive_path(job)))
    return name, last_id, lines


def _delete(name: str) -> None:
    """Delete a file no row names (any more); one that will not go is only logged."""
    try:
        default_storage.delete(name)
    except Exception:
        logger.warning("could not delete the replaced log archive %s", name, exc_info=True)


def build(job_id: int) -> bool:
    """Write the ended job's log archive and record it on the job. Returns True when it
    recorded a new one; False when the job is gone or not ended yet, its archive is already
    current, or another build recorded one at least as full meanwhile. Safe to run twice."""
    try:
        return _build(job_id)
    finally:
        with suppress(redis.RedisError):
            shared_redis().delete(PENDING_KEY.format(job_id=job_id))


def _build(job_id: int) -> bool:
    job = Job.objects.filter(pk=job_id).first()
    if job is None or not job.is_terminal:
        return False
    if current_archive(job) is not None and default_storage.exists(job.log_archive_name):
        return False
    name, last_id, lines = _write(job)
    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job_id)
        previous = locked.log_archive_name
        # A build at least as full as this one was recorded meanwhile (and its file is there).
        as_full = previous and previous != name and locked.log_archive_lines >= lines
        if as_full and default_storage.exists(previous):
            after_commit(_delete, name)
            return False
        Job.objects.filter(pk=job_id).update(
            log_archive_name=name, log_archive_last_id=last_id, log_archive_lines=lines
        )
        if previous and previous != name:
            after_commit(_delete, previous)
    return True
