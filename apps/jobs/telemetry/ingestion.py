"""Ingestion of a runner's log batches: validate, mask secrets, store once, parse metrics.

A batch is stored in one transaction. `(job, attempt, seq)` is unique. On PostgreSQL a new
batch goes in by one binary COPY (about twice an INSERT's speed); one that repeats a stored
seq (a retry) breaks the constraint, undoes only its savepoint, and goes in by one INSERT
(`unnest` of arrays) that skips the pairs already there. So a batch the runner sends again
is stored once and the counts stay exact. Only lines actually inserted are parsed for
metrics and counted. A batch marked `follows` waits, bounded, for the batch before it
(`wait_for_predecessor`), so ids keep the order of seqs when the runner has two in flight.

The lines always land: what a line says is the workload's business, so metric or event data
the database cannot hold (a NUL or a lone surrogate in a key, a step past the `integer`
column, NaN nested in a grading line, a nesting too deep to read) is cleaned or dropped,
never allowed to fail the batch (which the runner would retry forever, losing every later
line). What was dropped, and why, is said in one `source=system` line per batch. The metric
and event writes also run in a savepoint, so anything unforeseen the database refuses in
them costs those writes (and a system line), not the lines.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, NoReturn

import psycopg
import psycopg.errors
from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.db.models import Max

from apps.core.bulk import insert_rows
from apps.core.errors import InvalidRequest, NotFound
from apps.core.transactions import after_commit
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.kinds import hooks_for
from apps.jobs.live import push
from apps.jobs.models import Attempt, Job, LogLine, MetricPoint
from apps.jobs.telemetry import series, tracker_runs
from apps.jobs.telemetry.masking import secret_masker
from apps.jobs.telemetry.metrics import MAX_STEP, may_hold_metric_lines, parse_metric_line
from runner import protocol

logger = logging.getLogger(__name__)

MAX_BATCH_LINES = 5000
# A batch that follows one in flight waits this long at most for it (polling every
# FOLLOW_POLL_S): a 5,000-line batch is stored in well under a tenth of a second.
FOLLOW_WAIT_S = 2.0
FOLLOW_POLL_S = 0.005
MAX_MESSAGE_CHARS = 16384
# `LogLine.seq` is a PositiveIntegerField (PostgreSQL `integer`).
MAX_SEQ = 2_147_483_647
# A grading line nested deeper than this is not kept as an event (no verdict needs it).
MAX_GRADING_DEPTH = 32
# The system line that reports what a batch dropped names at most this many things.
MAX_DROP_NOTES = 10
_SURROGATES = re.compile("[\ud800-\udfff]")
_SOURCES = frozenset(LogLine.Source.values)
_STREAMS = frozenset(LogLine.Stream.values)


class IncomingLine(NamedTuple):
    # A tuple, not a frozen dataclass: a batch makes thousands, and a frozen dataclass's
    # __init__ costs several times a tuple's.
    seq: int
    timestamp: datetime
    source: str
    stream: str
    message: str


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int


def parse_batch(payload: object) -> list[IncomingLine]:
    """Validate a `{"lines": [...]}` body; InvalidRequest names the first bad field."""
    if not isinstance(payload, dict) or not isinstance(payload.get("lines"), list):
        raise InvalidRequest("The body must be an object with a list of lines.", param="lines")
    raw_lines = payload["lines"]
    if len(raw_lines) > MAX_BATCH_LINES:
        raise InvalidRequest(f"At most {MAX_BATCH_LINES} lines a batch.", param="lines")
    parsed = []
    append = parsed.append
    fromisoformat = datetime.fromisoformat
    new_line = tuple.__new__
    for index, raw in enumerate(raw_lines):
        # The hot path: plain type checks first; only a line that fails one is examined
        # again, to name its first bad field.
        if type(raw) is dict:
            seq, ts, message = raw.get("seq"), raw.get("ts"), raw.get("message")
            source, stream = raw.get("source", "user"), raw.get("stream", "stdout")
            if (
                type(seq) is int
                and 1 <= seq <= MAX_SEQ
                and type(ts) is str
                and type(message) is str
                and type(source) is str
                and source in _SOURCES
                and type(stream) is str
                and stream in _STREAMS
            ):
                try:
                    timestamp = fromisoformat(ts)
                except ValueError:
                    timestamp = None
                if timestamp is not None and timestamp.tzinfo is not None:
                    # tuple.__new__ rather than the named tuple's own __new__ (a Python
                    # function): a batch makes thousands of these.
                    append(
                        new_line(IncomingLine, (seq, timestamp, source, stream, _storable(message)))
                    )
                    continue
        _refuse(raw, f"lines[{index}]")
    return parsed


def _refuse(raw: object, param: str) -> NoReturn:
    """Raise InvalidRequest naming the first bad field of a line that failed the fast checks."""
    if not isinstance(raw, dict):
        raise InvalidRequest("A line must be an object.", param=param)
    seq, ts, message = raw.get("seq"), raw.get("ts"), raw.get("message")
    source, stream = raw.get("source", "user"), raw.get("stream", "stdout")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        raise InvalidRequest(
            f"seq must be a whole number from 1 to {MAX_SEQ}.", param=f"{param}.seq"
        )
    try:
        timestamp = datetime.fromisoformat(ts if isinstance(ts, str) else None)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest("ts must be an ISO 8601 time.", param=f"{param}.ts") from exc
    if timestamp.tzinfo is None:
        raise InvalidRequest("ts must carry a time zone.", param=f"{param}.ts")
    if not isinstance(source, str) or source not in _SOURCES:
        raise InvalidRequest("source must be user or system.", param=f"{param}.source")
    if not isinstance(stream, str) or stream not in _STREAMS:
        raise InvalidRequest("stream must be stdout or stderr.", param=f"{param}.stream")
    if not isinstance(message, str):
        raise InvalidRequest("message must be a string.", param=f"{param}.message")
    raise InvalidRequest("The line is not valid.", param=param)  # a subclass of int or str


def parse_follows(payload: dict) -> int | None:
    """The optional `follows` of a batch: the last seq of the batch sent just before it."""
    follows = payload.get("follows")
    if follows is None:
        return None
    if type(follows) is not int or not 1 <= follows <= MAX_SEQ:
        raise InvalidRequest(f"follows must be a whole number from 1 to {MAX_SEQ}.", "follows")
    return follows


def wait_for_predecessor(*, job_id: int, attempt: int, seq: int) -> bool:
    """Wait, at most FOLLOW_WAIT_S, until the line `seq` of the attempt is stored (the batch
    before this one, sent at the same time, commits first). True when it is. Bounded, so a
    predecessor that never comes (a lost request the runner will send again) delays a batch
    but never stalls the log. Call outside a transaction."""
    lines = LogLine.objects.filter(job_id=job_id, attempt=attempt, seq=seq)
    deadline = time.monotonic() + FOLLOW_WAIT_S
    while not lines.exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(FOLLOW_POLL_S)
    return True


def _storable(message: str) -> str:
    """`message` cut to MAX_MESSAGE_CHARS as text PostgreSQL can hold: no NUL, and a lone
    surrogate (which a JSON `\\ud800` escape decodes to; it has no UTF-8 form) becomes
    U+FFFD, as the runner's own decoding with replacement would have made it."""
    message = message[:MAX_MESSAGE_CHARS]
    if message.isascii():  # the common case: no surrogate can be there
        return message.replace("\x00", "") if "\x00" in message else message
    return _SURROGATES.sub("\ufffd", message.replace("\x00", ""))


def ingest(*, attempt: Attempt, job: Job, lines: list[IncomingLine]) -> IngestResult:
    if not lines:
        return IngestResult(0, 0)
    messages = _masked(attempt, job, lines)
    with transaction.atomic():
        inserted = _insert(job.pk, attempt.number, lines, messages)
        _record_inserted(attempt, job, lines, inserted)
    return IngestResult(accepted=len(inserted), duplicates=len(lines) - len(inserted))


class Batch(NamedTuple):
    """One runner's batch among many (`ingest_many`)."""

    attempt: Attempt  # with its job loaded
    lines: list[IncomingLine]


def ingest_many(batches: list[Batch]) -> list[IngestResult | Exception]:
    """Store the batches of many attempts (a relay's bundle, docs/runner-protocol.md): what
    `ingest` of each, one after another, would store and answer, in the order given. Each
    place holds the batch's IngestResult, or the exception its `ingest` raised (a job
    deleted meanwhile; a bug), which touched no other batch: a batch that cannot be stored
    must never hold back the others its relay sends with it.

    On PostgreSQL, when no batch repeats a stored seq (nearly always), every line of every
    batch goes in by one binary COPY and the rest in one transaction: per batch, what is
    left is its job's live sequence (one UPDATE) and its push. Should anything in that
    transaction fail (a retried batch's seq, a job deleted, a deadlock), all of it is undone
    and each batch is stored on its own, so one batch's trouble is never another's."""
    results: list[IngestResult | Exception] = [IngestResult(0, 0)] * len(batches)
    todo = [index for index, batch in enumerate(batches) if batch.lines]
    if len(todo) > 1 and connection.vendor == "postgresql":
        try:
            return _ingest_together(batches, todo, results)
        except (DatabaseError, NotFound, psycopg.Error):
            logger.info("a bundle of %d batches is stored batch by batch", len(todo))
        except Exception:  # a bug: still, no batch may hold the others back
            logger.exception("a bundle of %d batches is stored batch by batch", len(todo))
    for index in todo:
        attempt, lines = batches[index]
        try:
            results[index] = ingest(attempt=attempt, job=attempt.job, lines=lines)
        except Exception as exc:  # its answer alone (a 404, a 500), never the bundle's
            results[index] = exc
    return results


def _ingest_together(batches: list[Batch], todo: list[int], results: list) -> list:
    """`ingest_many`'s one-transaction way; raises, having stored nothing, when any batch
    cannot go that way.

    A batch whose new lines may hold metrics, a grading or a serving line is recorded as a
    batch alone is (its job's row locked first, under which those are written). The rest,
    nearly all, need only their jobs' live sequence and line counts: one UPDATE for all of
    them, last, so the bundle holds those rows for the shortest time."""
    masked = {
        index: _masked(batches[index].attempt, batches[index].attempt.job, batches[index].lines)
        for index in todo
    }
    # Jobs' rows are locked in id order, as every bundle does, so two bundles never wait on
    # each other in a cycle.
    todo = sorted(todo, key=lambda index: (batches[index].attempt.job_id, index))
    with transaction.atomic():
        connection.ensure_connection()
        inserted = _copy_many([(batches[index], masked[index]) for index in todo])
        plain: list[tuple[int, list]] = []
        for index, rows in zip(todo, inserted, strict=True):
            attempt, lines = batches[index]
            results[index] = IngestResult(accepted=len(rows), duplicates=len(lines) - len(rows))
            if _needs_parsing(_user_text(rows)):
                _record_inserted(attempt, attempt.job, lines, rows)
            elif rows:
                plain.append((index, rows))
        writes: dict[int, list[tuple[int, int]]] = {}
        for index, rows in plain:
            user = sum(1 for row in rows if row[1] == LogLine.Source.USER)
            writes.setdefault(batches[index].attempt.job_id, []).append((user, len(rows) - user))
        seqs = push.bump_live_seqs(writes) if writes else {}
        push.push_lines_on_commit(
            [
                (
                    batches[index].attempt.job,
                    seqs[batches[index].attempt.job_id].pop(0),
                    (batches[index].attempt.number, [row[0] for row in rows]),
                )
                for index, rows in plain
            ]
        )
    return results


def _masked(attempt: Attempt, job: Job, lines: list[IncomingLine]) -> list[str]:
    masker = secret_masker(attempt, job)
    return [masker.mask(line.message) for line in lines]


def _record_inserted(attempt: Attempt, job: Job, lines: list[IncomingLine], inserted) -> None:
    """What follows storing a batch's new lines, in its transaction: the job's live
    sequence and line counts, metrics and events parsed from them, the push after commit,
    and a system line for whatever could not be stored."""
    if not inserted:
        return
    user = sum(1 for row in inserted if row[1] == LogLine.Source.USER)
    dropped = _Dropped()
    # The live sequence first: it locks the job's row, which the metric series summary is
    # read and written under (and which a resume holds while it supersedes points), so two
    # batches of a job never interleave there.
    seq = push.bump_live_seq(job.pk, user_lines=user, system_lines=len(inserted) - user)
    times = {line.seq: line.timestamp for line in lines}
    metric_ids = _store_parsed(job, attempt.number, inserted, times, dropped)
    push.push_on_commit(
        job=job,
        seq=seq,
        log_seqs=(attempt.number, [row[0] for row in inserted]),
        metric_ids=metric_ids,
    )
    if dropped.notes:
        services.system_log(job=job, attempt=attempt.number, message=dropped.message())


@dataclass
class _Dropped:
    """What a batch's lines carried that could not be stored, for one system line."""

    notes: list[str] = field(default_factory=list)

    def add(self, note: str) -> None:
        self.notes.append(note)

    def message(self) -> str:
        shown = self.notes[:MAX_DROP_NOTES]
        more = len(self.notes) - len(shown)
        tail = f"; and {more} more" if more else ""
        return "Dropped what could not be stored: " + "; ".join(shown) + tail + "."


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seq_list(seqs: list[int]) -> str:
    shown = ", ".join(map(str, seqs[:MAX_DROP_NOTES]))
    return shown + (", …" if len(seqs) > MAX_DROP_NOTES else "")


def _user_text(inserted) -> str:
    """The user lines of a batch's inserted rows, joined for a scan."""
    return "\n".join([row[2] for row in inserted if row[1] == LogLine.Source.USER])


def _needs_parsing(text: str) -> bool:
    """Whether a batch's user text may hold a metric, grading or serving line."""
    return (
        may_hold_metric_lines(text)
        or f'"{protocol.LINE_GRADING}"' in text
        or f'"{protocol.LINE_SERVING}"' in text
        or f'"{protocol.LINE_TRACKER_RUN}"' in text
    )


def _store_parsed(job: Job, attempt: int, inserted, times, dropped: _Dropped) -> list[int]:
    """Metric points and grading events of the inserted lines, in a savepoint: whatever the
    database still refuses there costs these writes, never the lines."""
    # Most batches hold no metric, grading or serving line: one scan of the batch's user
    # text says so, and their lines are not looked at one by one.
    text = _user_text(inserted)
    try:
        with transaction.atomic():
            metric_ids = (
                _store_metrics(job, attempt, inserted, times, dropped)
                if may_hold_metric_lines(text)
                else []
            )
            if f'"{protocol.LINE_GRADING}"' in text:
                _record_grading(job, attempt, inserted, dropped)
            if f'"{protocol.LINE_SERVING}"' in text:
                _record_service_port(job, attempt, inserted)
            if f'"{protocol.LINE_TRACKER_RUN}"' in text:
                tracker_runs.record(
                    job, attempt, _user_json_lines(inserted, protocol.LINE_TRACKER_RUN)
                )
            return metric_ids
    except (DataError, IntegrityError, ValueError) as exc:
        logger.warning("metrics of a log batch of job %s not stored", job.pk, exc_info=True)
        reason = f"the database refused them: {type(exc).__name__}"
    except Exception as exc:
        # A line our parsing did not expect must not fail the batch: the runner would resend
        # it forever. The lines are stored; what they say is dropped, and logged as a bug.
        logger.exception("metrics of a log batch of job %s could not be read", job.pk)
        reason = f"they could not be read: {type(exc).__name__}"
    seqs = [row[0] for row in inserted]
    dropped.add(
        f"the metrics and grading events of lines seq {min(seqs)} to {max(seqs)} ({reason})"
    )
    return []


def _insert(job_id: int, attempt: int, lines: list[IncomingLine], messages: list[str]):
    """Insert what is new; returns (seq, source, message) of the inserted rows, by seq."""
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        try:
            # A batch sent for the first time (nearly every one) goes in by binary COPY, about
            # twice as fast as an INSERT; a batch with a seq already stored (a retry) breaks
            # the unique constraint, undoes only this savepoint, and goes the INSERT way.
            with transaction.atomic():
                return _copy(job_id, attempt, lines, messages)
        except psycopg.errors.UniqueViolation:
            return _insert_new(job_id, attempt, lines, messages)
    table = LogLine._meta.db_table
    inserted = []  # SQLite (the `make run` default): row by row, skipping known seqs
    with connection.cursor() as cursor:
        for line, message in zip(lines, messages, strict=True):
            cursor.execute(
                f"INSERT OR IGNORE INTO {table} "
                "(job_id, attempt, seq, source, stream, timestamp, message) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [job_id, attempt, line.seq, line.source, line.stream, line.timestamp, message],
            )
            if cursor.rowcount:
                inserted.append((line.seq, line.source, message))
    return inserted


_COPY_COLUMNS = "job_id, attempt, seq, source, stream, timestamp, message"
_COPY_TYPES = ["int8", "int4", "int4", "text", "text", "timestamptz", "text"]


def _copy(job_id: int, attempt: int, lines: list[IncomingLine], messages: list[str]):
    """Every line of the batch by one binary COPY, in seq order, so the ids the table gives
    them follow their seqs as an INSERT's would. Raises UniqueViolation when a seq of the
    batch is already stored."""
    table = LogLine._meta.db_table
    rows = sorted(zip(lines, messages, strict=True))  # IncomingLine sorts by seq first
    statement = f"COPY {table} ({_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
    with psycopg.Cursor(connection.connection) as cursor, cursor.copy(statement) as copy:
        copy.set_types(_COPY_TYPES)
        write = copy.write_row
        for (seq, timestamp, source, stream, _), message in rows:
            write((job_id, attempt, seq, source, stream, timestamp, message))
    return [(line.seq, line.source, message) for line, message in rows]


def _copy_many(batches: list[tuple[Batch, list[str]]]) -> list[list]:
    """The lines of many batches by one binary COPY (each batch's in seq order); for each
    batch, what `_copy` returns. Raises UniqueViolation when any seq is already stored."""
    table = LogLine._meta.db_table
    statement = f"COPY {table} ({_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
    inserted = []
    with psycopg.Cursor(connection.connection) as cursor, cursor.copy(statement) as copy:
        copy.set_types(_COPY_TYPES)
        write = copy.write_row
        for (attempt, lines), messages in batches:
            job_id, number = attempt.job_id, attempt.number
            rows = sorted(zip(lines, messages, strict=True))
            for (seq, timestamp, source, stream, _), message in rows:
                write((job_id, number, seq, source, stream, timestamp, message))
            inserted.append([(line.seq, line.source, message) for line, message in rows])
    return inserted


def _insert_new(job_id: int, attempt: int, lines: list[IncomingLine], messages: list[str]):
    """The lines whose (attempt, seq) is not stored yet, by one INSERT that skips the rest."""
    table = LogLine._meta.db_table
    # A server-side-binding cursor sends the five arrays in binary (%b), rather than
    # spelling a thousand values out in the SQL text.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"INSERT INTO {table} (job_id, attempt, seq, source, stream, timestamp, message) "
            "SELECT %b, %b, s.seq, s.source, s.stream, s.ts, s.message FROM unnest("
            "%b::integer[], %b::text[], %b::text[], %b::timestamptz[], %b::text[]) "
            "AS s(seq, source, stream, ts, message) "
            "ON CONFLICT (job_id, attempt, seq) WHERE seq IS NOT NULL DO NOTHING "
            "RETURNING seq, source, message",
            [
                job_id,
                attempt,
                [line.seq for line in lines],
                [line.source for line in lines],
                [line.stream for line in lines],
                [line.timestamp for line in lines],
                messages,
            ],
        )
        return sorted(cursor.fetchall())


class _TooDeep(Exception):
    pass


def _json_storable(value, depth: int = 0):
    """`value` (read by json.loads) as `jsonb` can store it: a non-finite number becomes its
    name ("nan", "inf", "-inf"; JSON has no NaN), NUL is removed from strings and keys, a lone
    surrogate becomes U+FFFD. Raises _TooDeep past MAX_GRADING_DEPTH levels."""
    if depth > MAX_GRADING_DEPTH:
        raise _TooDeep
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value.replace("\x00", ""))
    if isinstance(value, list):
        return [_json_storable(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {
            _json_storable(key, depth + 1): _json_storable(item, depth + 1)
            for key, item in value.items()
        }
    return value  # None, bool, int


def _record_grading(job: Job, attempt: int, inserted, dropped: _Dropped) -> None:
    """A workload that grades itself prints `{"type": "grading", ...}` (the built-in trainer
    does): keep the verdict as an event, which the job page shows."""
    for seq, source, message in inserted:
        if source != LogLine.Source.USER or f'"{protocol.LINE_GRADING}"' not in message:
            continue
        try:
            line = json.loads(message)
        except RecursionError:
            dropped.add(f"the grading line seq {seq} (nested too deep to read)")
            continue
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("type") == protocol.LINE_GRADING:
            verdict = "passed" if line.get("passed") else "failed"
            try:
                data = _json_storable(line)
            except _TooDeep:
                dropped.add(
                    f"the grading line seq {seq} (nested over {MAX_GRADING_DEPTH} levels deep)"
                )
                continue
            services.record_event(
                job=job,
                attempt=attempt,
                type=JobEventType.GRADING,
                message=f"Self-grading {verdict}.",
                data=data,
            )


def _user_json_lines(inserted, line_type: str) -> list[dict]:
    """The JSON objects of `type` `line_type` among the inserted user lines, in seq order."""
    found = []
    for _seq, source, message in inserted:
        if source != LogLine.Source.USER or f'"{line_type}"' not in message:
            continue
        try:
            line = json.loads(message)
        except (ValueError, RecursionError):
            continue
        if isinstance(line, dict) and line.get("type") == line_type:
            found.append(line)
    return found


def _record_service_port(job: Job, attempt: int, inserted) -> None:
    """A serving workload prints `{"type": "serving", "port": N}` once it listens: keep the
    port on its attempt (the first announcement wins) and tell the job's kind after commit.
    Only kinds that serve are listened to: another job's line names no server of ours."""
    hooks = hooks_for(job)
    if not hooks.serves:
        return
    for _seq, source, message in inserted:
        if source != LogLine.Source.USER or f'"{protocol.LINE_SERVING}"' not in message:
            continue
        try:
            line = json.loads(message)
        except (ValueError, RecursionError):
            continue
        if not isinstance(line, dict) or line.get("type") != protocol.LINE_SERVING:
            continue
        port = line.get("port")
        if not _is_port(port):
            continue
        updated = Attempt.objects.filter(
            job=job, number=attempt, ended_at__isnull=True, service_port__isnull=True
        ).update(service_port=port)
        if updated:
            services.record_event(
                job=job,
                attempt=attempt,
                type=JobEventType.SERVICE_READY,
                message=f"The server listens on port {port}.",
                data={"port": port},
            )
            after_commit(lambda port=port: hooks.service_ready(job, attempt, port))
        return


def _is_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


_POINT_FIELDS = ("job", "attempt", "step", "loss", "epoch", "learning_rate", "extra")


def _store_metrics(job: Job, attempt: int, inserted, times, dropped: _Dropped) -> list[int]:
    """MetricPoints (the lines as printed) and their named samples (`series`). A line without
    a step is numbered: a training line (it has a `loss`) takes the next step; any other (a
    Hugging Face evaluation dict, the final summary) reports on the step training is at, so
    evaluation series line up with the training steps they evaluate."""
    points = []
    samples: list[series.Sample] = []
    next_step = None
    past_last_step = []
    for seq, source, message in inserted:
        if source != LogLine.Source.USER:
            continue
        metric = parse_metric_line(message)
        if metric is None:
            continue
        if metric.dropped_keys:
            keys = ", ".join(_shown(repr(key)) for key in metric.dropped_keys[:MAX_DROP_NOTES])
            dropped.add(
                f"from the metric line seq {seq}, the key(s) {keys} "
                "(NUL and lone surrogate characters cannot be stored)"
            )
        step = metric.step
        if step is None:
            if next_step is None:
                next_step = (
                    MetricPoint.objects.filter(job=job, superseded=False).aggregate(m=Max("step"))[
                        "m"
                    ]
                    or 0
                ) + 1
            step = next_step if metric.loss is not None else max(next_step - 1, 0)
        if step > MAX_STEP:
            past_last_step.append(seq)
            continue
        next_step = step + 1 if metric.loss is not None or metric.step is not None else next_step
        samples += series.samples_of(metric, step=step, time=times[seq])
        points.append(
            (job.pk, attempt, step, metric.loss, metric.epoch, metric.learning_rate, metric.extra)
        )
    if past_last_step:
        dropped.add(
            f"{len(past_last_step)} metric line(s) without a step (seq "
            f"{_seq_list(past_last_step)}): no step is left after {MAX_STEP}, "
            "the largest that can be stored"
        )
    if not points:
        return []
    ids = insert_rows(MetricPoint, _POINT_FIELDS, points)
    refused = series.record(job, attempt, samples).refused_names
    if refused:
        names = ", ".join(_shown(repr(name)) for name in refused[:MAX_DROP_NOTES])
        dropped.add(
            f"the values of metric(s) {names} (a job keeps at most {series.MAX_SERIES} series, "
            f"with names of at most {series.MAX_NAME_CHARS} characters)"
        )
    return ids
