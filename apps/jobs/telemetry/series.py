"""Metric lines as named series: one `MetricSample` per value, and the job's series summary.

A parsed metric line becomes one sample per value it carries: `loss`, `learning_rate`,
`epoch` and each number of `extra` (`val_loss`, `eval_loss`, `grad_norm`, ...). The metrics
API reads these a series at a time from an index, which the wide `MetricPoint` rows (one per
printed line, with the extra numbers in JSON) cannot offer.

A series has one point per step. A later report of a series at a step it already has
supersedes the earlier one: a resumed attempt re-reporting the step it resumed at (nanoGPT
evaluates again at the checkpoint's step), or an evaluation dict repeating the `epoch` its
training line gave. Within a batch the last report wins.

`Job.metric_series` ({name: {step, value, time, attempt, points}}) is kept here, in the same
transaction, so reading the latest values costs no query. The caller holds the job's row
lock (ingestion bumps the live sequence first), so batches of one job update it in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from apps.core.bulk import insert_rows
from apps.jobs.models import Job, MetricSample
from apps.jobs.selectors import series_entry
from apps.jobs.telemetry.metrics import ParsedMetric

# Longer names are not stored (no trainer writes one; the column is bounded).
MAX_NAME_CHARS = 200
# A job keeps at most this many series; values of further names are dropped (and said), so
# a workload printing a fresh key every step cannot grow the summary without bound.
MAX_SERIES = 200


@dataclass(frozen=True)
class Sample:
    name: str
    step: int
    value: float
    time: datetime


@dataclass(frozen=True)
class RecordResult:
    stored: int
    # Names whose values were not stored (too long, or past MAX_SERIES), for the caller's note.
    refused_names: tuple[str, ...] = ()


def samples_of(metric: ParsedMetric, *, step: int, time: datetime) -> list[Sample]:
    """The named values of one parsed line, at `step`."""
    values: list[tuple[str, float | None]] = [
        ("loss", metric.loss),
        ("learning_rate", metric.learning_rate),
        ("epoch", metric.epoch),
        *metric.extra.items(),
    ]
    return [Sample(name, step, value, time) for name, value in values if value is not None]


def record(job: Job, attempt: int, samples: list[Sample]) -> RecordResult:
    """Store `samples` of one batch (in the order printed) and update the job's summary.
    Call inside the batch's transaction, holding the job's row lock."""
    if not samples:
        return RecordResult(0)
    summary = Job.objects.filter(pk=job.pk).values_list("metric_series", flat=True).get() or {}
    kept, refused = _admitted(_last_per_step(samples), summary)
    if not kept:
        return RecordResult(0, refused)
    _supersede_earlier(job, kept, summary)
    insert_rows(
        MetricSample,
        ("job", "attempt", "step", "name", "value", "time"),
        [(job.pk, attempt, sample.step, sample.name, sample.value, sample.time) for sample in kept],
    )
    for sample in kept:
        entry = summary.get(sample.name)
        points = (entry["points"] if entry else 0) + 1
        if entry is None or sample.step >= entry["step"]:
            entry = series_entry(
                step=sample.step, value=sample.value, time=sample.time, attempt=attempt
            )
        summary[sample.name] = {**entry, "points": points}
    Job.objects.filter(pk=job.pk).update(metric_series=summary)
    return RecordResult(len(kept), refused)


def _last_per_step(samples: list[Sample]) -> list[Sample]:
    """One sample per (name, step): the last printed, kept in print order."""
    last = {(sample.name, sample.step): index for index, sample in enumerate(samples)}
    return [samples[index] for index in sorted(last.values())]


def _admitted(samples: list[Sample], summary: dict) -> tuple[list[Sample], tuple[str, ...]]:
    room = MAX_SERIES - len(summary)
    new_names: set[str] = set()
    refused: dict[str, None] = {}
    kept = []
    for sample in samples:
        if sample.name not in summary and sample.name not in new_names:
            if len(sample.name) > MAX_NAME_CHARS or len(new_names) >= room:
                refused[sample.name] = None
                continue
            new_names.add(sample.name)
        kept.append(sample)
    return kept, tuple(refused)


def _supersede_earlier(job: Job, samples: list[Sample], summary: dict) -> None:
    """Mark the stored points these samples report again, and take them out of the counts.
    Only steps the batch reports are read, from the (job, step) index, and only when one of
    them is not past its series' latest: a run that moves forward reads nothing."""
    if all(
        sample.name not in summary or sample.step > summary[sample.name]["step"]
        for sample in samples
    ):
        # Past each series' latest step (the summary's, kept by every write and recomputed
        # by a resume): nothing stored reports these steps, and there is nothing to read.
        return
    wanted = {(sample.name, sample.step) for sample in samples}
    steps = [sample.step for sample in samples]
    earlier = MetricSample.objects.filter(
        job=job,
        superseded=False,
        step__gte=min(steps),
        step__lte=max(steps),
        name__in={sample.name for sample in samples},
    ).values_list("id", "name", "step")
    ids = []
    for pk, name, step in earlier:
        if (name, step) in wanted:
            ids.append(pk)
            if name in summary:
                summary[name] = {**summary[name], "points": summary[name]["points"] - 1}
    if ids:
        MetricSample.objects.filter(pk__in=ids).update(superseded=True)
