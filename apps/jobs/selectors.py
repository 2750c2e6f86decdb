"""Reads of jobs that are more than a filter: the job list with its counter-based total, the
pages of logs and events, and a job's metric series."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from django.db import connection
from django.db.models import (
    CharField,
    Count,
    Func,
    Prefetch,
    Q,
    QuerySet,
    Sum,
    prefetch_related_objects,
)
from django.db.models.fields.json import KT
from django.http import Http404

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.core.pagination import MAX_ID, PageRequest, created_page, encode_cursor, id_page
from apps.jobs.models import (
    Artifact,
    Attempt,
    Job,
    JobCounter,
    JobEvent,
    LogLine,
    MetricSample,
)
from apps.jobs.states import TERMINAL_STATES, JobState
from apps.projects.models import Project


def job_for_org(organization: Organization, public_id: str) -> Job:
    """The organization's job, or 404 (the same answer for another org's job)."""
    job = (
        Job.objects.for_org(organization)
        .select_related("project")
        .with_attempts()
        .with_reruns()
        .filter(public_id=public_id)
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return job


def as_created(job: Job) -> Job:
    """A job `services.job_create` has just created, as `job_for_org` would load it, without
    reading it again: its project is the one it was created with, and it has no attempts yet.
    (The re-read was a fifth of a submit's time.)"""
    prefetch_related_objects(
        [job],
        Prefetch("attempts", queryset=Attempt.objects.none()),
        Prefetch("reruns", queryset=Job.objects.none()),
    )
    job.rerun_of_public_id = job.rerun_of.public_id if job.rerun_of else None
    return job


def job_list(
    organization: Organization,
    page: PageRequest,
    *,
    project_id: str | None = None,
    state: str | None = None,
) -> tuple[list[Job], str | None, int]:
    """Newest first, keyset-paginated on (created_at, id); `total` from the job counters, so
    neither the page nor the total costs more as the organization's jobs grow."""
    jobs = Job.objects.for_org(organization)
    counters = JobCounter.objects.filter(organization=organization)
    if project_id:
        project = Project.objects.for_org(organization).filter(public_id=project_id).first()
        if project is None:
            raise Http404("No such project.")
        jobs = jobs.filter(project=project)
        counters = counters.filter(project=project)
    if state:
        if state not in JobState.values:
            raise InvalidRequest(f"Unknown state {state!r}.", param="state")
        jobs = jobs.filter(state=state)
        counters = counters.filter(state=state)
    jobs = jobs.select_related("project").with_attempts().with_reruns()
    rows, next_cursor = created_page(jobs, page)
    total = counters.aggregate(total=Sum("count"))["total"] or 0
    return rows, next_cursor, total


# What a JSON log page carries of each line, in this order (`api.log_pages` renders them).
LOG_PAGE_FIELDS = ("id", "timestamp", "source", "stream", "message", "attempt")


class _Rfc3339Utc(Func):
    """A timestamp as the API writes it (RFC 3339 in UTC, microseconds, `Z`), formatted by
    PostgreSQL: a page's 10,000 datetimes built by the driver cost 65 ms, these 5."""

    template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    output_field = CharField()


def _log_page_values(lines: QuerySet[LogLine]) -> QuerySet:
    """`lines` as `LOG_PAGE_FIELDS` tuples; on PostgreSQL the timestamp comes as its text."""
    if connection.vendor != "postgresql":
        return lines.values_list(*LOG_PAGE_FIELDS)
    fields = ["stamp" if name == "timestamp" else name for name in LOG_PAGE_FIELDS]
    return lines.annotate(stamp=_Rfc3339Utc("timestamp")).values_list(*fields)


def log_page(
    job: Job, page: PageRequest, *, source: str | None
) -> tuple[list[tuple], str | None, int]:
    """One page of the job's log lines as `LOG_PAGE_FIELDS` tuples (no model instances: a
    page may hold thousands; the timestamp a datetime, or on PostgreSQL its RFC 3339 text),
    its next cursor and the number of lines there are."""
    lines = LogLine.objects.filter(job=job)
    if source:
        if source not in LogLine.Source.values:
            raise InvalidRequest("source must be user or system.", param="source")
        lines = lines.filter(source=source)
    rows, next_cursor = _log_order_page(job, lines, page)
    if source == LogLine.Source.USER:
        total = job.user_log_lines
    elif source == LogLine.Source.SYSTEM:
        total = job.system_log_lines
    else:
        total = job.user_log_lines + job.system_log_lines
    return rows, next_cursor, total


def _log_order_page(
    job: Job, lines: QuerySet[LogLine], page: PageRequest
) -> tuple[list[tuple], str | None]:
    """One page of `lines` in log order (attempt, position, id; see `LogLine`), not id
    order: a batch stored late after an outage still reads in its seqs' place. The cursor
    stays what it always was, the id of the page's last line; the next page starts after
    that line's place in the order."""
    after = None
    if page.after is not None:
        line_id = page.after[0]
        if isinstance(line_id, int) and not isinstance(line_id, bool) and 0 <= line_id <= MAX_ID:
            after = LogLine.objects.filter(job=job).position_of(line_id)
        if after is None:
            raise InvalidRequest("The cursor is not valid.", param="cursor")
    ordered = lines.in_log_order(descending=page.descending).beyond(
        after, descending=page.descending
    )
    rows = list(_log_page_values(ordered)[: page.limit + 1])
    has_more = len(rows) > page.limit
    rows = rows[: page.limit]
    return rows, encode_cursor([rows[-1][0]]) if has_more else None


def event_page(job: Job, page: PageRequest) -> tuple[list[JobEvent], str | None, int]:
    rows, next_cursor = id_page(JobEvent.objects.filter(job=job), page)
    return rows, next_cursor, JobEvent.objects.filter(job=job).count()


# -- metric series -------------------------------------------------------------------------

# `MetricSample.step` is a PositiveIntegerField (PostgreSQL `integer`).
MAX_STEP = 2_147_483_647
_WHOLE_NUMBER = re.compile(r"[0-9]+", re.ASCII)


def finite_or_none(value: float | None) -> float | None:
    """A value as JSON can carry it: NaN and infinity (a diverging run) become null."""
    return value if value is not None and math.isfinite(value) else None


def series_entry(*, step: int, value: float | None, time: datetime, attempt: int) -> dict:
    """A series' latest point as `Job.metric_series` keeps it (without its `points`)."""
    return {
        "step": step,
        "value": finite_or_none(value),
        "time": time.astimezone(UTC).isoformat(),
        "attempt": attempt,
    }


def metric_series(job: Job) -> dict:
    """`Job.metric_series` recomputed from the samples that are not superseded: for a
    resume, which supersedes points of any series at once. One grouped count, then the
    latest point of each series from the series index."""
    live = MetricSample.objects.filter(job=job, superseded=False)
    counts = dict(live.values_list("name").annotate(n=Count("id")).order_by("name"))
    summary = {}
    for name, points in counts.items():
        latest = live.filter(name=name).order_by("-step", "-id").first()
        entry = series_entry(
            step=latest.step, value=latest.value, time=latest.time, attempt=latest.attempt
        )
        summary[name] = {**entry, "points": points}
    return summary


def latest_metrics(job: Job) -> dict[str, float | None]:
    """{name: latest value} for the job object: read from the job row, no query."""
    return {name: entry["value"] for name, entry in sorted((job.metric_series or {}).items())}


def since_step_param(raw: str | None) -> int | None:
    """`since_step` as given: a whole number of 0 or more (any size), else a 400 naming it."""
    if raw in (None, ""):
        return None
    if len(raw) > 100 or not _WHOLE_NUMBER.fullmatch(raw):
        raise InvalidRequest("since_step must be a whole number of 0 or more.", param="since_step")
    return int(raw)


def _cursor_key(after: list) -> tuple[int, int]:
    """(step, id) from a metrics cursor, or a 400 naming `cursor`."""
    step, last_id = after
    for value, top in ((step, MAX_STEP), (last_id, MAX_ID)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise InvalidRequest("The cursor is not valid.", param="cursor")
    return step, last_id


def metric_page(
    job: Job, page: PageRequest, *, name: str | None, since_step: int | None
) -> tuple[list[MetricSample], str | None, int]:
    """Points that are not superseded, keyset-paginated on (step, id), filtered by series
    name and first step. Served by the partial indexes (job, name, step, id) and
    (job, step, id); `total` comes from the job's series summary unless `since_step` asks
    for a range, so an unfiltered page of a 100k-point job counts nothing."""
    after = _cursor_key(page.after) if page.after is not None else None
    summary = job.metric_series or {}
    if name is not None and name not in summary:
        return [], None, 0  # no such series: nothing to read (nor a name to send to the database)
    if since_step is not None and since_step > MAX_STEP:
        return [], None, 0
    points = MetricSample.objects.filter(job=job, superseded=False)
    if name is not None:
        points = points.filter(name=name)
    if since_step:  # 0 is every step: nothing to filter or count
        points = points.filter(step__gte=since_step)
        total = points.count()
    elif name is not None:
        total = summary[name]["points"]
    else:
        total = sum(entry["points"] for entry in summary.values())
    if after is not None:
        step, last_id = after
        if page.descending:
            points = points.filter(Q(step__lt=step) | Q(step=step, id__lt=last_id), step__lte=step)
        else:
            points = points.filter(Q(step__gt=step) | Q(step=step, id__gt=last_id), step__gte=step)
    order = ("-step", "-id") if page.descending else ("step", "id")
    rows = list(points.order_by(*order)[: page.limit + 1])
    if len(rows) <= page.limit:
        return rows, None, total
    rows = rows[: page.limit]
    return rows, encode_cursor([rows[-1].step, rows[-1].id]), total


# Storage hooks, found by dotted path from the apps below `jobs` that need them
# (apps.accounts.storage, apps.workdirs.services): they cannot import this module.


def artifact_bytes_stored(organization: Organization) -> int:
    """Bytes of the organization's checkpoints and adapters (its storage quota counts them)."""
    return (
        Artifact.objects.filter(job__organization=organization).aggregate(total=Sum("size_bytes"))[
            "total"
        ]
        or 0
    )


def live_job_naming_workdir(organization_id: int, workdir_id: str) -> Job | None:
    """The oldest job of the organization that has not ended and names the code archive
    `workdir_id` as its `container.workdir` (its next attempt downloads it)."""
    return (
        Job.objects.filter(organization_id=organization_id, spec__container__workdir=workdir_id)
        .exclude(state__in=TERMINAL_STATES)
        .order_by("created_at", "id")
        .first()
    )


def workdirs_in_use(since: datetime) -> set[tuple[int, str]]:
    """(organization id, workdir id) of every code archive that a job created at or after
    `since`, or a job that has not ended, names."""
    named = (
        Job.objects.filter(spec__container__has_key="workdir")
        .filter(Q(created_at__gte=since) | ~Q(state__in=TERMINAL_STATES))
        .annotate(workdir_id=KT("spec__container__workdir"))
        .values_list("organization_id", "workdir_id")
        .distinct()
    )
    return {(org_id, workdir_id) for org_id, workdir_id in named if workdir_id}
