"""Jobs side by side: what the compare page and `GET /api/v1/compute/jobs/compare` show
(docs/api.md, docs/dashboard.md).

For 2 to 10 jobs of one organization: each job's configuration as flat dotted keys, the
keys whose values differ between them, each metric's final and best value, cost and
duration; and for the chart, one metric's points of every job.

Decisions the brief left open:
- The configuration is the stored spec (secret references only, never values, as the job
  page shows it) without `name`, which is what tells the jobs apart, not a setting. A
  training kind's config (`JobKind.config_env`) is shown as `training.<field>` in place of
  the env entry that carries it as JSON. Dicts flatten to dotted keys; lists stay values.
- "Best" is the lowest value, except for series whose name says higher is better
  (`HIGHER_IS_BETTER`: accuracy, f1, reward, throughput, ...), and there is none for the
  series that follow a schedule rather than measure the run (`NO_BEST`: epoch, learning
  rate, grad norm). NaN and infinite points are never best.
- Another organization's job is the same 404 as a job that does not exist.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, Max, Min, Window
from django.db.models.functions import RowNumber
from django.http import Http404
from django.utils import timezone

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Job, MetricSample

MIN_JOBS = 2
MAX_JOBS = 10
# Points per job on the chart: an even sample of a longer series (as the job page's chart).
CHART_MAX_POINTS = 2000
# A series whose name holds one of these words is better when higher.
HIGHER_IS_BETTER = (
    "accuracy",
    "acc",
    "f1",
    "bleu",
    "rouge",
    "reward",
    "score",
    "precision",
    "recall",
    "auc",
    "exact_match",
)
# Rates of work done: tokens_per_s, samples_per_second, throughput, mfu_pct.
_THROUGHPUT = re.compile(r"per_s(ec(ond)?)?\b|throughput|mfu")
# Series with no better direction: the schedule the run follows, or a diagnostic.
NO_BEST = frozenset({"epoch", "learning_rate", "lr", "grad_norm"})
_ID = re.compile(r"^job_[A-Za-z0-9]{1,28}$")
_WORDS = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class MetricSummary:
    final: float | None
    final_step: int
    best: float | None
    goal: str | None  # "min", "max", or None: no value is better (NO_BEST)
    points: int


@dataclass(frozen=True)
class ComparedJob:
    job: Job
    config: dict[str, Any]
    metrics: dict[str, MetricSummary]
    duration_s: float | None


@dataclass(frozen=True)
class Comparison:
    jobs: list[ComparedJob]
    # dotted key -> {job id: value (None where a job lacks the key)}, only keys that differ
    differences: dict[str, dict[str, Any]]
    metric_names: list[str]

    @property
    def live(self) -> bool:
        """Whether any of the jobs may still change (the page keeps polling)."""
        return any(not compared.job.is_terminal for compared in self.jobs)


def parse_ids(values: Iterable[str]) -> list[str]:
    """Job ids from `ids` query values, each a comma-separated list (`?ids=a,b` and
    `?ids=a&ids=b` alike), in the order given. InvalidRequest (`param="ids"`) for fewer
    than MIN_JOBS or more than MAX_JOBS, a repeated id or one that is not a job id."""
    ids = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if len(ids) < MIN_JOBS:
        raise InvalidRequest(f"Pick at least {MIN_JOBS} jobs to compare.", param="ids")
    if len(ids) > MAX_JOBS:
        raise InvalidRequest(f"Compare at most {MAX_JOBS} jobs at once.", param="ids")
    for job_id in ids:
        if not _ID.match(job_id):
            raise InvalidRequest(f"{job_id[:40]!r} is not a job id.", param="ids")
    if len(set(ids)) != len(ids):
        raise InvalidRequest("A job is listed twice.", param="ids")
    return ids


def jobs_of(organization: Organization, ids: list[str]) -> list[Job]:
    """The organization's jobs `ids`, in that order; Http404 naming the first that is not
    one of them (whether missing or another organization's)."""
    found = {
        job.public_id: job
        for job in Job.objects.for_org(organization)
        .select_related("project")
        .filter(public_id__in=ids)
    }
    for job_id in ids:
        if job_id not in found:
            raise Http404(f"No such job: {job_id}.")
    return [found[job_id] for job_id in ids]


def compare(organization: Organization, ids: list[str]) -> Comparison:
    """The comparison of the organization's jobs `ids` (as `parse_ids` gives them)."""
    jobs = jobs_of(organization, ids)
    configs = {job.public_id: config_of(job) for job in jobs}
    summaries = metric_summaries(jobs)
    compared = [
        ComparedJob(
            job=job,
            config=configs[job.public_id],
            metrics=summaries.get(job.pk, {}),
            duration_s=duration_seconds(job),
        )
        for job in jobs
    ]
    names = sorted({name for entry in compared for name in entry.metrics})
    return Comparison(jobs=compared, differences=differences(configs), metric_names=names)


def config_of(job: Job) -> dict[str, Any]:
    """The job's configuration as flat dotted keys (see the module's docstring)."""
    spec = {key: value for key, value in (job.spec or {}).items() if key != "name"}
    hooks = hooks_for(job)
    training = hooks.training_config(job)
    if training is not None and hooks.config_env:
        container = dict(spec.get("container") or {})
        container["env"] = {
            name: value
            for name, value in (container.get("env") or {}).items()
            if name != hooks.config_env
        }
        spec = {**spec, "container": container, "training": training}
    return dict(sorted(flatten(spec).items()))


def flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}, "c": [1]}` → `{"a.b": 1, "c": [1]}`; an empty dict adds nothing."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(item, dict):
            flat.update(flatten(item, f"{dotted}."))
        else:
            flat[dotted] = item
    return flat


def differences(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The keys whose values are not the same in every config, with each job's value. Values
    are compared as JSON reads them (`1` and `true` differ; `2e-4` and `0.0002` do not)."""
    keys = sorted({key for config in configs.values() for key in config})
    different = {}
    for key in keys:
        values = {job_id: config.get(key) for job_id, config in configs.items()}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            different[key] = values
    return different


def goal_of(name: str) -> str | None:
    """`max` for a series that is better higher (its name holds a HIGHER_IS_BETTER word, or
    is a rate of work), None for one of NO_BEST, else `min`."""
    lowered = name.lower()
    if lowered in NO_BEST:
        return None
    if set(_WORDS.split(lowered)).intersection(HIGHER_IS_BETTER) or _THROUGHPUT.search(lowered):
        return "max"
    return "min"


def metric_summaries(jobs: list[Job]) -> dict[int, dict[str, MetricSummary]]:
    """Per job pk, per series: the final point (from the job row's summary), the best
    finite value and the count of points that are not superseded. One grouped query."""
    finite = (
        # Between the infinities: neither infinite nor NaN (PostgreSQL orders NaN above every
        # number; SQLite keeps it as NULL). `NOT IN (NaN, …)` would drop every row on SQLite,
        # which binds NaN as NULL.
        MetricSample.objects.filter(
            job__in=jobs, superseded=False, value__gt=-math.inf, value__lt=math.inf
        )
        .values("job_id", "name")
        .annotate(low=Min("value"), high=Max("value"))
        .order_by()
    )
    bounds = {(row["job_id"], row["name"]): (row["low"], row["high"]) for row in finite}
    summaries: dict[int, dict[str, MetricSummary]] = {}
    for job in jobs:
        per_job = {}
        for name, entry in sorted((job.metric_series or {}).items()):
            goal = goal_of(name)
            low, high = bounds.get((job.pk, name), (None, None))
            per_job[name] = MetricSummary(
                final=entry.get("value"),
                final_step=entry["step"],
                best={"max": high, "min": low}.get(goal),
                goal=goal,
                points=entry.get("points", 0),
            )
        summaries[job.pk] = per_job
    return summaries


def duration_seconds(job: Job) -> float | None:
    """From the job's start to its end, or to now while it runs; None before it started."""
    if job.started_at is None:
        return None
    end = job.terminal_at or timezone.now()
    return max(0.0, (end - job.started_at).total_seconds())


def chart_series(jobs: list[Job], name: str) -> dict[int, list[list[float | None]]]:
    """Per job pk, the [step, value] points of series `name` that are not superseded, in
    step order; a NaN or infinite value as None (a gap in the line). A series longer than
    CHART_MAX_POINTS is an even sample of it, taken by the database (every stride-th
    point by row number), so a page polling ten long runs reads at most 20,000 rows."""
    live = MetricSample.objects.filter(name=name, superseded=False)
    counts = dict(
        live.filter(job__in=jobs).values_list("job_id").annotate(n=Count("id")).order_by()
    )
    points: dict[int, list[list[float | None]]] = {}
    for job in jobs:
        rows = live.filter(job=job)
        stride = counts.get(job.pk, 0) // CHART_MAX_POINTS + 1
        if stride > 1:
            number = Window(RowNumber(), order_by=[F("step").asc(), F("id").asc()])
            rows = rows.annotate(number=number).annotate(offset=(F("number") - 1) % stride)
            rows = rows.filter(offset=0)
        points[job.pk] = [
            [step, value if value is not None and math.isfinite(value) else None]
            for step, value in rows.order_by("step", "id").values_list("step", "value")
        ]
    return points
