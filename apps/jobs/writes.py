"""One write to a job: its state changes, events, system log lines and columns, made in as
few statements as the write needs, with one live sequence number and one push.

A `JobWrite` gathers everything one step does to a job (an allocation: an event, a log
line, two state changes) into one UPDATE of the job, one INSERT of its events, one of its
log lines and one upsert of the state counters, so a watching page gets one push with all
of it (docs/realtime.md: one write, one sequence number). Why one: each separate UPDATE of
the job would take a sequence number and a push of its own, and re-read the locked row, on
the path every dispatch takes.

The caller holds the job's row lock and read `job` under it (`select_for_update`), so the
state the write starts from is the row's; the UPDATE checks that it still is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.utils import timezone

from apps.billing import holds
from apps.jobs import enqueue, states
from apps.jobs.events import JobEventType
from apps.jobs.live import push
from apps.jobs.models import Job, JobCounter, JobEvent, LogLine
from apps.jobs.states import IllegalTransition, JobState


@dataclass
class JobWrite:
    """Collect a write to `job` (locked by the caller), then `save()` it in its transaction.

    `transition` checks each step against `states.TRANSITIONS` as it is added (so a chain
    such as requested → allocating → provisioning is checked hop by hop) and raises
    IllegalTransition at once, before the job's row is written."""

    job: Job
    _events: list[JobEvent] = field(default_factory=list, init=False)
    _lines: list[LogLine] = field(default_factory=list, init=False)
    _columns: dict[str, object] = field(default_factory=dict, init=False)
    _from_state: str = field(default="", init=False)
    _state_changed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._from_state = self.job.state

    @property
    def changes_anything(self) -> bool:
        return bool(self._events or self._lines or self._columns)

    def set(self, **columns: object) -> JobWrite:
        """Columns of the job to write (model field names); the job object sees them at once,
        so events added after take, say, its new attempt count."""
        for name, value in columns.items():
            setattr(self.job, name, value)
            self._columns[name] = value
        return self

    def event(
        self, *, type: str, message: str = "", data: dict | None = None, attempt: int | None = None
    ) -> JobWrite:
        job = self.job
        self._events.append(
            JobEvent(
                job=job,
                attempt=attempt if attempt is not None else (job.attempt_count or None),
                type=type,
                message=message,
                data=data or {},
            )
        )
        return self

    def system_log(self, *, attempt: int, message: str) -> JobWrite:
        """A `source=system` line written by the control plane (allocation, launch, ...)."""
        self._lines.append(
            LogLine(
                job=self.job,
                attempt=attempt,
                source=LogLine.Source.SYSTEM,
                stream=LogLine.Stream.STDOUT,
                timestamp=timezone.now(),
                message=message,
            )
        )
        return self

    def transition(
        self,
        to: str,
        *,
        reason: str | None = None,
        message: str = "",
        data: dict | None = None,
        exit_code: int | None = None,
        error_message: str | None = None,
    ) -> JobWrite:
        """Move the job on to `to`, with its `state_changed` event. An ended state releases
        the job's holds and has its log archived after commit."""
        job = self.job
        current = job.state
        if not states.is_legal(current, to):
            raise IllegalTransition(job.public_id, current, to)
        now = timezone.now()
        changed = {"state": to, "reason": reason}
        if to == JobState.RUNNING and job.started_at is None:
            changed["started_at"] = now
        if states.is_terminal(to):
            changed["terminal_at"] = now
        if exit_code is not None:
            changed["exit_code"] = exit_code
        if error_message is not None:
            changed["error_message"] = error_message
        self.set(**changed)
        if states.is_terminal(to):
            holds.release_holds(job.pk)
            enqueue.archive_log_on_commit(job.pk)  # logs.txt then serves one gzip file
            if to == JobState.SUCCEEDED:
                enqueue.succeeded_on_commit(job.pk)
        if states.is_terminal(to) or to == JobState.PREEMPTED:
            enqueue.outcome_on_commit(job.pk, to)
        self._state_changed = True
        return self.event(
            type=JobEventType.STATE_CHANGED,
            message=message or f"{current} → {to}" + (f" ({reason})" if reason else ""),
            data={"from": current, "to": to, "reason": reason, **(data or {})},
        )

    def save(self) -> Job:
        """Write it all: the job's row first (its columns and its next live sequence number,
        in one UPDATE), then its events and log lines, then the state counters (last: those
        rows are shared by every job of the project in that state), and push it after
        commit. Call inside the transaction that holds the job's lock."""
        job = self.job
        seq = self._update_job()
        events = JobEvent.objects.bulk_create(self._events) if self._events else []
        lines = (
            LogLine.objects.bulk_create(LogLine.objects.place(self._lines)) if self._lines else []
        )
        if job.state != self._from_state:  # a chain back to where it began moves no count
            count(job, self._from_state, job.state)
        push.push_on_commit(
            job=job,
            seq=seq,
            event_ids=[event.pk for event in events],
            log_ids=[line.pk for line in lines],
            state_changed=self._state_changed,
        )
        return job

    def _update_job(self) -> int:
        job = self.job
        columns = dict(self._columns)
        if self._state_changed:
            columns["updated_at"] = timezone.now()
        assignments = ["live_seq = live_seq + 1", "system_log_lines = system_log_lines + %s"]
        params: list[object] = [len(self._lines)]
        for name, value in columns.items():
            model_field = Job._meta.get_field(name)
            assignments.append(f"{connection.ops.quote_name(model_field.column)} = %s")
            params.append(model_field.get_db_prep_save(value, connection))
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} SET {', '.join(assignments)} "
                "WHERE id = %s AND state = %s RETURNING live_seq",
                [*params, job.pk, self._from_state],
            )
            row = cursor.fetchone()
        if row is None:  # not the state the caller read under the lock: a caller's bug
            raise IllegalTransition(job.public_id, self._from_state, job.state)
        job.live_seq = row[0]
        if "updated_at" in columns:
            job.updated_at = columns["updated_at"]
        return row[0]


def count(job: Job, old: str | None, new: str) -> None:
    """Move the job from one counter bucket to another (same transaction as the write).
    Buckets are touched in a fixed order so concurrent transitions cannot deadlock."""
    deltas = {new: 1} if old is None else {old: -1, new: 1}
    table = JobCounter._meta.db_table
    states_in_order = sorted(deltas)  # one statement; its rows are upserted in this order
    values = ", ".join(["(%s, %s, %s, %s)"] * len(states_in_order))
    params = [
        value
        for state in states_in_order
        for value in (job.organization_id, job.project_id, state, deltas[state])
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (organization_id, project_id, state, count) VALUES {values} "
            "ON CONFLICT (organization_id, project_id, state) "
            f"DO UPDATE SET count = {table}.count + EXCLUDED.count",
            params,
        )
