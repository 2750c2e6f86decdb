"""Reads of sweeps: one sweep with its trials, each trial's objective metric, the best
trial, counts by state and what the trials cost. Every read starts from an organization."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.db.models import Prefetch, QuerySet

from apps.accounts.models import Organization
from apps.core.errors import NotFound
from apps.core.money import micros_to_usd
from apps.jobs.states import JobState
from apps.projects.models import Project
from apps.sweeps.models import Sweep, Trial


@dataclass
class TrialView:
    index: int
    values: dict
    state: str
    job_id: str | None
    metric: float | None
    cost_micros: int
    error: str
    best: bool = False
    ordered_values: list = field(default_factory=list)  # in the order of the sweep's params

    @property
    def cost_usd(self) -> float:
        return micros_to_usd(self.cost_micros)


@dataclass
class SweepView:
    sweep: Sweep
    trials: list[TrialView]
    counts: dict[str, int] = field(default_factory=dict)
    cost_micros: int = 0
    best: TrialView | None = None


def _with_trials(sweeps: QuerySet[Sweep]) -> QuerySet[Sweep]:
    trials = Trial.objects.select_related("job").order_by("index")
    return sweeps.select_related("project").prefetch_related(Prefetch("trials", queryset=trials))


def sweep_for_org(organization: Organization, sweep_id: str, *, project: Project | None = None):
    """The sweep `sweep_id` of `organization` (and of `project`, when given) as a
    SweepView; NotFound for any other, another organization's included."""
    sweeps = Sweep.objects.for_org(organization)
    if project is not None:
        sweeps = sweeps.filter(project=project)
    sweep = _with_trials(sweeps).filter(public_id=sweep_id).first()
    if sweep is None:
        raise NotFound("No such sweep.")
    return view_of(sweep)


def sweeps_of_project(project: Project) -> list[SweepView]:
    """The project's sweeps, newest first, each with its progress and best trial."""
    return [view_of(sweep) for sweep in _with_trials(project.sweeps.all())]


def view_of(sweep: Sweep) -> SweepView:
    """`sweep` (its trials prefetched with their jobs) read for a page or an answer."""
    trials = [_trial_view(sweep, trial) for trial in sweep.trials.all()]
    counts: dict[str, int] = {"total": len(trials)}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    best = best_trial(trials, sweep.direction)
    if best is not None:
        best.best = True
    return SweepView(
        sweep=sweep,
        trials=trials,
        counts=counts,
        cost_micros=sum(trial.cost_micros for trial in trials),
        best=best,
    )


def best_trial(trials: list[TrialView], direction: str) -> TrialView | None:
    """The succeeded trial with the best objective (lowest for `minimize`), the earlier
    trial on a tie; None while no succeeded trial has reported the metric."""
    scored = [
        trial
        for trial in trials
        if trial.state == JobState.SUCCEEDED
        and trial.metric is not None
        and math.isfinite(trial.metric)
    ]
    if not scored:
        return None
    sign = 1 if direction == Sweep.Direction.MINIMIZE else -1
    return min(scored, key=lambda trial: (sign * trial.metric, trial.index))


def _trial_view(sweep: Sweep, trial: Trial) -> TrialView:
    job = trial.job
    state = job.state if trial.state == Trial.State.STARTED and job is not None else trial.state
    metric = None
    if job is not None:
        point = (job.metric_series or {}).get(sweep.objective) or {}
        metric = point.get("value")
    return TrialView(
        index=trial.index,
        values=trial.values,
        state=state,
        job_id=job.public_id if job is not None else None,
        metric=metric,
        cost_micros=job.accrued_micros if job is not None else 0,
        error=trial.error,
        ordered_values=[trial.values.get(path) for path in sweep.params],
    )
