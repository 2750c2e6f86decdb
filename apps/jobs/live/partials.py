"""What a job page shows, as partials: rendered for the first page load, for each live push
and for a catch-up after a gap, with the same templates (docs/realtime.md).

The page renders a window — the newest rows — not everything, so a job with a million log
lines opens as fast as an empty one; older lines load on demand by cursor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import chain

from django.template.loader import render_to_string
from django.utils.module_loading import import_string

from apps.core.template_filters import sci, sig
from apps.jobs import overview
from apps.jobs.events import ARTIFACT_EVENTS, RESUME_EVENTS, JobEventType
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Artifact, Job, JobEvent, LogLine, MetricPoint
from apps.jobs.states import JobState
from apps.providers.backends import where_it_runs

WINDOW = 100
PUSH_LOG_LINES = 100
CHART_MAX_POINTS = 2000
CANCELLABLE = frozenset(
    {
        JobState.REQUESTED,
        JobState.ALLOCATING,
        JobState.PROVISIONING,
        JobState.RUNNING,
        JobState.PREEMPTED,
    }
)


@dataclass(frozen=True)
class Row:
    """One row of the training-events table: a lifecycle event or a metric step."""

    dom_id: str
    kind: str
    time: object
    step: int | None
    loss: float | None
    label: str
    detail: str


def job_for_push(job_pk: int) -> Job:
    return (
        Job.objects.select_related("project", "organization", "created_by")
        .with_attempts()
        .get(pk=job_pk)
    )


def event_row(event: JobEvent) -> Row:
    return Row(f"evt-{event.id}", "event", event.created_at, None, None, event.type, event.message)


def metric_row(point: MetricPoint) -> Row:
    details = []
    if point.epoch is not None:
        details.append(f"epoch {sig(point.epoch)}")
    if point.learning_rate is not None:
        details.append(f"lr {sci(point.learning_rate)}")
    details += [f"{key} {sig(value)}" for key, value in sorted(point.extra.items())]
    return Row(
        f"met-{point.id}",
        "metric",
        point.created_at,
        point.step,
        point.loss,
        "step",
        ", ".join(details),
    )


def latest_metric(job: Job) -> MetricPoint | None:
    return MetricPoint.objects.filter(job=job).order_by("-id").first()


def _plotted(metric_id: int, step: int, loss: float) -> list[float | None]:
    """One chart point. A NaN or infinite loss is plotted as null, a gap in the line: JSON
    has no NaN (a bare `NaN` stops the page's JSON.parse), and the metrics table shows the
    value itself."""
    return [metric_id, step, loss if math.isfinite(loss) else None]


def chart_json(points: list) -> str:
    """Chart points as strict JSON (`allow_nan=False`: a non-finite number is a bug here)."""
    return json.dumps(points, allow_nan=False)


def chart_points(points) -> list[list[float | None]]:
    """[metric id, step, loss] triples; the page drops ids it has already plotted."""
    return [_plotted(p.id, p.step, p.loss) for p in points if p.loss is not None]


def initial_chart(job: Job) -> list[list[float | None]]:
    """Every point, or an even sample of CHART_MAX_POINTS of them (plain tuples, no model
    instances: a long run has tens of thousands)."""
    rows = MetricPoint.objects.filter(job=job, loss__isnull=False, superseded=False).order_by("id")
    count = rows.count()
    triples = rows.values_list("id", "step", "loss")
    if count > CHART_MAX_POINTS:
        stride = count // CHART_MAX_POINTS + 1
        return [_plotted(*t) for index, t in enumerate(triples.iterator()) if index % stride == 0]
    return [_plotted(*t) for t in triples]


def resume_steps(job: Job) -> list[int]:
    """Steps where a later attempt picked up the run (0: it started over), marked on the
    loss chart."""
    return [
        int((data or {}).get("step") or 0)
        for data in JobEvent.objects.filter(job=job, type__in=RESUME_EVENTS)
        .order_by("id")
        .values_list("data", flat=True)
    ]


def window_rows(job: Job) -> list[Row]:
    events = list(JobEvent.objects.filter(job=job).order_by("-id")[:WINDOW])[::-1]
    metrics = list(MetricPoint.objects.filter(job=job).order_by("-id")[:WINDOW])[::-1]
    # Oldest first, by id within a time: a batch's metric points share their created_at.
    rows = sorted(chain(map(event_row, events), map(metric_row, metrics)), key=lambda row: row.time)
    return rows[-WINDOW:]


def window_logs(job: Job) -> list[LogLine]:
    """The last WINDOW lines in log order (attempt, position, id), oldest first."""
    lines = LogLine.objects.filter(job=job).in_log_order(descending=True)
    return list(reversed(lines[:WINDOW]))


def older_logs(job: Job, before_id: int) -> list[LogLine]:
    """The WINDOW lines before line `before_id` in log order, oldest first; none when it is
    not a line of this job."""
    lines = LogLine.objects.filter(job=job)
    before = lines.position_of(before_id)
    if before is None:
        return []
    older = lines.in_log_order(descending=True).beyond(before, descending=True)
    return list(reversed(older[:WINDOW]))


def has_older_logs(job: Job, first: LogLine) -> bool:
    """Whether any line of the job reads before `first` (one of `older_logs`' lines)."""
    return LogLine.objects.filter(job=job).in_log_order().beyond(first, descending=True).exists()


def artifacts_context(job: Job) -> dict:
    grading = JobEvent.objects.filter(job=job, type=JobEventType.GRADING).order_by("-id").first()
    published = (
        JobEvent.objects.filter(
            job=job, type__in=(JobEventType.PUBLISHED_TO_HUB, JobEventType.PUBLISH_FAILED)
        )
        .order_by("-id")
        .first()
    )
    return {
        "job": job,
        "artifacts": list(Artifact.objects.filter(job=job).order_by("id")),
        "grading": grading.data if grading else None,
        "published": published,
    }


TRACKER_LABELS = {"wandb": "W&B", "mlflow": "MLflow"}


def tracker_runs_context(job: Job) -> dict:
    """The job's tracker runs (W&B, MLflow) for the links under its status: one per run the
    workload reported, the attempt named when the job had several."""
    events = list(JobEvent.objects.filter(job=job, type=JobEventType.TRACKER_RUN).order_by("id"))
    several = len({event.attempt for event in events}) > 1
    runs = [
        {
            "label": TRACKER_LABELS.get(event.data.get("tracker"), "Tracker"),
            "url": event.data.get("url"),
            "run_id": event.data.get("run_id", ""),
            "attempt": event.attempt if several else None,
        }
        for event in events
    ]
    return {"tracker_runs": runs}


def waiting_reason(job: Job) -> str:
    """Why a job that waits for hardware is waiting, in the overview's words ("" for one
    that does not wait)."""
    if job.state not in overview.QUEUED_STATES:
        return ""
    return overview.waiting_reasons([job], over_budget=False)[job.pk]


# Placement's own account of why a job waits, offer by offer. It lives in
# apps.jobs.execution, above this layer, so it is found by its dotted path (as kinds are).
EXPLAIN_WAITING = "apps.jobs.execution.placement.explain"
WAITING_STATES = frozenset({JobState.REQUESTED, JobState.PREEMPTED})


def waiting_explanation(job: Job):
    """`placement.explain(job)` for a job waiting to be placed; None for any other."""
    if job.state not in WAITING_STATES:
        return None
    return import_string(EXPLAIN_WAITING)(job)


def state_context(job: Job) -> dict:
    """Every fact of the job page that changes while it runs: status, cost, attempts and
    the Configuration block. Rendered for the page, each state push and each catch-up, so
    the live page and a reload of it say the same."""
    attempts = list(job.attempts.select_related("provider"))
    current = attempts[-1] if attempts else None
    return {
        "job": job,
        "attempts": attempts,
        "current_attempt": current,
        "runs": where_it_runs(current.provider, current.handle) if current else "",
        "cancellable": job.state in CANCELLABLE,
        "waiting": waiting_reason(job),
        "waiting_explained": waiting_explanation(job),
        "training": hooks_for(job).training_config(job),
    }


def render_page_context(job: Job) -> dict:
    """Everything the job page's first render needs, read in the order pushes are made:
    the live sequence first, so anything newer arrives as a push (and duplicates are
    dropped by id on the page)."""
    seq = job.live_seq
    return {
        **state_context(job),
        "seq": seq,
        "latest": latest_metric(job),
        "rows": window_rows(job),
        "log_lines": window_logs(job),
        "has_older_logs": job.user_log_lines + job.system_log_lines > WINDOW,
        "chart_points": initial_chart(job),
        "chart_resumes": resume_steps(job),
        "config_json": json.dumps(job.spec, indent=2, sort_keys=True),
        **{key: value for key, value in artifacts_context(job).items() if key != "job"},
        **tracker_runs_context(job),
    }


def _render(template: str, context: dict) -> str:
    return render_to_string(f"jobs/partials/{template}", context)


def _render_rows(rows: list[Row]) -> str:
    return "".join(_render("row.html", {"row": row}) for row in rows)


def render_push(
    job: Job, *, seq: int, event_ids, log_ids, metric_ids, state_changed, log_seqs=None
) -> str:
    parts = [_render("live_marker.html", {"seq": seq, "oob": True})]
    if state_changed:
        parts.append(_state_parts(job))
    events = list(JobEvent.objects.filter(id__in=event_ids).order_by("id"))
    rows = [event_row(e) for e in events]
    if any(event.type in ARTIFACT_EVENTS for event in events):
        parts.append(_render("artifacts.html", {**artifacts_context(job), "oob": True}))
    if any(event.type == JobEventType.TRACKER_RUN for event in events):
        parts.append(_render("tracker_runs.html", {**tracker_runs_context(job), "oob": True}))
    parts += [_resume_part(event) for event in events if event.type in RESUME_EVENTS]
    points = list(MetricPoint.objects.filter(id__in=metric_ids).order_by("id"))
    rows += [metric_row(p) for p in points]
    if rows:
        parts.append(f'<div hx-swap-oob="beforeend:#events-body">{_render_rows(rows)}</div>')
    if points:
        parts.append(_metric_parts(job, points[-1], points))
    if log_ids:
        lines = LogLine.objects.filter(id__in=sorted(log_ids)[-PUSH_LOG_LINES:]).order_by("id")
        parts.append(_log_part(lines, skipped=max(0, len(log_ids) - PUSH_LOG_LINES)))
    if log_seqs and log_seqs[1]:
        attempt, seqs = log_seqs
        lines = LogLine.objects.filter(
            job=job, attempt=attempt, seq__in=sorted(seqs)[-PUSH_LOG_LINES:]
        ).order_by("id")
        parts.append(_log_part(lines, skipped=max(0, len(seqs) - PUSH_LOG_LINES)))
    return "".join(parts)


def render_catch_up(job: Job, *, after_event: int, after_log: int, after_metric: int) -> str:
    """Everything newer than the ids a page holds, as the same out-of-band partials."""
    parts = [
        _render("live_marker.html", {"seq": job.live_seq, "oob": True}),
        _state_parts(job),
        _render("artifacts.html", {**artifacts_context(job), "oob": True}),
        _render("tracker_runs.html", {**tracker_runs_context(job), "oob": True}),
    ]
    events = list(JobEvent.objects.filter(job=job, id__gt=after_event).order_by("id")[:1000])
    points = list(MetricPoint.objects.filter(job=job, id__gt=after_metric).order_by("id")[:5000])
    rows = sorted(
        chain(map(event_row, events), map(metric_row, points[-WINDOW:])), key=lambda row: row.time
    )
    if rows:
        parts.append(f'<div hx-swap-oob="beforeend:#events-body">{_render_rows(rows)}</div>')
    parts += [_resume_part(event) for event in events if event.type in RESUME_EVENTS]
    if points:
        parts.append(_metric_parts(job, points[-1], points))
    # What the page missed is what was stored after the last line it holds (by id: a batch
    # stored late is missed too), shown in log order among itself.
    new_logs = LogLine.objects.filter(job=job, id__gt=after_log)
    newest = sorted(new_logs.order_by("-id").values_list("id", flat=True)[:PUSH_LOG_LINES])
    lines = list(LogLine.objects.filter(id__in=newest).in_log_order())
    if lines:
        skipped = new_logs.filter(id__lt=newest[0]).count() if len(lines) == PUSH_LOG_LINES else 0
        parts.append(_log_part(lines, skipped=skipped))
    return "".join(parts)


def _state_parts(job: Job) -> str:
    context = {**state_context(job), "oob": True}
    return "".join(
        _render(name, context)
        for name in (
            "status.html",
            "page_actions.html",  # e.g. Open in Playground once a fine-tune succeeded
            "cost.html",
            "error_banner.html",
            "attempts.html",
            "facts.html",
            "connect_state.html",  # the Connect panel shows while the job runs
        )
    )


def _metric_parts(job: Job, latest: MetricPoint, points) -> str:
    card = _render("metrics_card.html", {"latest": latest, "oob": True})
    feed = _render("chart_feed.html", {"points_json": chart_json(chart_points(points))})
    return card + f'<div hx-swap-oob="beforeend:#chart-feed">{feed}</div>'


def _resume_part(event: JobEvent) -> str:
    """A resume marker for the chart: the page drops points past the step (they are trained
    again) and draws a line there."""
    feed = _render("chart_resume.html", {"step": int(event.data.get("step") or 0)})
    return f'<div hx-swap-oob="beforeend:#chart-feed">{feed}</div>'


def _log_part(lines, *, skipped: int) -> str:
    body = "".join(_render("log_line.html", {"line": line}) for line in lines)
    if skipped:
        body = _render("log_gap.html", {"skipped": skipped, "before": lines[0].id}) + body
    return f'<div hx-swap-oob="beforeend:#log-lines">{body}</div>'


def render_row_push(job: Job) -> str:
    """The job's row for a project's Jobs tab, inserted at the top or replacing the row
    the page already has (the page's script swaps rows by id)."""
    row = render_to_string("jobs/partials/job_row.html", {"job": job, "org": job.organization})
    return f'<tbody hx-swap-oob="afterbegin:#job-list-body">{row}</tbody>'


def push_facts(job: Job) -> dict:
    """What an all-jobs list filters a pushed row on (`apps.jobs.overview.JobFilters`)."""
    return {
        "job": job.public_id,
        "project": job.project.slug,
        "state": job.state,
        "kind": job.kind,
        "creator": job.created_by.username if job.created_by_id else "",
        "name": job.name,
    }


def render_org_row_push(job: Job) -> str:
    """The job's row for the all-jobs list (with its project), inserted at the top or
    replacing the row the page already has."""
    row = render_to_string("jobs/partials/org_job_row.html", {"job": job, "org": job.organization})
    return f'<tbody hx-swap-oob="afterbegin:#job-list-body">{row}</tbody>'


def render_row_delete(job: Job) -> str:
    """Takes the job's row off a list whose filters it no longer matches."""
    return f'<tr id="job-row-{job.public_id}" hx-swap-oob="delete"></tr>'
