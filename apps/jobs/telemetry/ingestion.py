"""Ingestion of a runner's log batches: validate, mask secrets, store once, parse metrics.

A batch is stored in one transaction with one multi-row INSERT (PostgreSQL: `unnest` of
arrays). `(job, attempt, seq)` is unique, and the INSERT skips pairs it already has, so a
batch the runner sends again is stored once and the counts stay exact. Only lines actually
inserted are parsed for metrics and counted.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.db import connection, transaction
from django.db.models import Max

from apps.core.errors import InvalidRequest
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.live import push
from apps.jobs.models import Attempt, Job, LogLine, MetricPoint
from apps.jobs.telemetry.metrics import parse_metric_line
from apps.secrets.selectors import resolve_secret_env
from runner import protocol
from runner.masking import Masker

MAX_BATCH_LINES = 5000
MAX_MESSAGE_CHARS = 16384
_SOURCES = frozenset(LogLine.Source.values)
_STREAMS = frozenset(LogLine.Stream.values)


@dataclass(frozen=True)
class IncomingLine:
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
    for index, raw in enumerate(raw_lines):
        param = f"lines[{index}]"
        if not isinstance(raw, dict):
            raise InvalidRequest("A line must be an object.", param=param)
        seq, ts, message = raw.get("seq"), raw.get("ts"), raw.get("message")
        source, stream = raw.get("source", "user"), raw.get("stream", "stdout")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise InvalidRequest("seq must be a whole number from 1.", param=f"{param}.seq")
        try:
            timestamp = datetime.fromisoformat(ts)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest("ts must be an ISO 8601 time.", param=f"{param}.ts") from exc
        if timestamp.tzinfo is None:
            raise InvalidRequest("ts must carry a time zone.", param=f"{param}.ts")
        if source not in _SOURCES:
            raise InvalidRequest("source must be user or system.", param=f"{param}.source")
        if stream not in _STREAMS:
            raise InvalidRequest("stream must be stdout or stderr.", param=f"{param}.stream")
        if not isinstance(message, str):
            raise InvalidRequest("message must be a string.", param=f"{param}.message")
        parsed.append(
            IncomingLine(
                seq, timestamp, source, stream, message[:MAX_MESSAGE_CHARS].replace("\x00", "")
            )
        )
    return parsed


class _MaskerCache:
    """Maskers per attempt for a minute, so a batch costs no decryption."""

    ttl_s = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, tuple[float, Masker]] = {}

    def get(self, attempt: Attempt, job: Job) -> Masker:
        now = time.monotonic()
        with self._lock:
            hit = self._items.get(attempt.pk)
            if hit and now - hit[0] < self.ttl_s:
                return hit[1]
        values = (
            list(
                resolve_secret_env(
                    organization=job.organization, secret_env=job.spec["container"]["secret_env"]
                ).values()
            )
            if job.spec["container"].get("secret_env")
            else []
        )
        masker = Masker(values)
        with self._lock:
            self._items[attempt.pk] = (now, masker)
        return masker


maskers = _MaskerCache()


def secret_masker(attempt: Attempt, job: Job) -> Masker:
    try:
        return maskers.get(attempt, job)
    except InvalidRequest:
        # A secret deleted since launch: nothing left to resolve, so nothing to mask with.
        return Masker([])


def ingest(*, attempt: Attempt, job: Job, lines: list[IncomingLine]) -> IngestResult:
    if not lines:
        return IngestResult(0, 0)
    masker = secret_masker(attempt, job)
    messages = [masker.mask(line.message) for line in lines]
    with transaction.atomic():
        inserted = _insert(job.pk, attempt.number, lines, messages)
        if inserted:
            user = sum(1 for row in inserted if row[2] == LogLine.Source.USER)
            metric_ids = _store_metrics(job, attempt.number, inserted)
            _record_grading(job, attempt.number, inserted)
            seq = push.bump_live_seq(job.pk, user_lines=user, system_lines=len(inserted) - user)
            push.push_on_commit(
                job=job, seq=seq, log_ids=[row[0] for row in inserted], metric_ids=metric_ids
            )
    return IngestResult(accepted=len(inserted), duplicates=len(lines) - len(inserted))


def _insert(job_id: int, attempt: int, lines: list[IncomingLine], messages: list[str]):
    """Insert what is new; returns (id, seq, source, message) of the inserted rows."""
    table = LogLine._meta.db_table
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        # A server-side-binding cursor sends the five arrays in binary (%b), rather than
        # spelling a thousand values out in the SQL text.
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(
                f"INSERT INTO {table} (job_id, attempt, seq, source, stream, timestamp, message) "
                "SELECT %b, %b, s.seq, s.source, s.stream, s.ts, s.message FROM unnest("
                "%b::integer[], %b::text[], %b::text[], %b::timestamptz[], %b::text[]) "
                "AS s(seq, source, stream, ts, message) "
                "ON CONFLICT (job_id, attempt, seq) WHERE seq IS NOT NULL DO NOTHING "
                "RETURNING id, seq, source, message",
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
            return sorted(cursor.fetchall(), key=lambda row: row[1])
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
                inserted.append((cursor.lastrowid, line.seq, line.source, message))
    return inserted


def _record_grading(job: Job, attempt: int, inserted) -> None:
    """A workload that grades itself prints `{"type": "grading", ...}` (the built-in trainer
    does): keep the verdict as an event, which the job page shows."""
    for _, _, source, message in inserted:
        if source != LogLine.Source.USER or f'"{protocol.LINE_GRADING}"' not in message:
            continue
        try:
            line = json.loads(message)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("type") == protocol.LINE_GRADING:
            verdict = "passed" if line.get("passed") else "failed"
            # JSON columns take no NaN: a non-finite loss is kept as its name.
            data = {
                key: str(value) if isinstance(value, float) and not math.isfinite(value) else value
                for key, value in line.items()
            }
            services.record_event(
                job=job,
                attempt=attempt,
                type=JobEventType.GRADING,
                message=f"Self-grading {verdict}.",
                data=data,
            )


def _store_metrics(job: Job, attempt: int, inserted) -> list[int]:
    points = []
    next_step = None
    for _, _, source, message in inserted:
        if source != LogLine.Source.USER:
            continue
        metric = parse_metric_line(message)
        if metric is None:
            continue
        step = metric.step
        if step is None:
            if next_step is None:
                next_step = (
                    MetricPoint.objects.filter(job=job, superseded=False).aggregate(m=Max("step"))[
                        "m"
                    ]
                    or 0
                ) + 1
            step = next_step
        next_step = step + 1
        points.append(
            MetricPoint(
                job=job,
                attempt=attempt,
                step=step,
                loss=metric.loss,
                epoch=metric.epoch,
                learning_rate=metric.learning_rate,
                extra=metric.extra,
            )
        )
    if not points:
        return []
    return [point.pk for point in MetricPoint.objects.bulk_create(points)]
