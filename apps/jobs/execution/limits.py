"""Limits: bill a live job to now and terminate it when its `max_cost_usd` or
`max_runtime_hours` binds, or when a budget over it (or its organization's balance) is
exhausted (apps.billing.budgets decides which). Limits end a job at once, with no grace:
the reference platform gives none on a binding limit."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.billing import budgets
from apps.jobs import services
from apps.jobs.execution.attempts import accounted_seconds, bill, stop_billing
from apps.jobs.models import Job
from apps.jobs.states import TERMINAL_STATES, JobState

LIVE_JOB_STATES = (
    JobState.ALLOCATING,
    JobState.PROVISIONING,
    JobState.RUNNING,
    JobState.FINALIZING,
    JobState.TERMINATING,
)
BUDGET_EXHAUSTED = "budget_exhausted"
NO_GRACE_REASONS = frozenset({"max_runtime", "max_cost", BUDGET_EXHAUSTED})


def grace_for(reason: str | None) -> float:
    return 0.0 if reason in NO_GRACE_REASONS else settings.TERMINATE_GRACE_S


def enforce_limits(job_id: int) -> None:
    """Bill the job to now and terminate it when a limit binds."""
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",), no_key=True).filter(pk=job_id).first()
        if job is None or job.state not in LIVE_JOB_STATES:
            return
        accrued = bill(job)
        if job.state in {JobState.TERMINATING, JobState.FINALIZING}:
            return
        reason = None
        if job.max_cost_micros is not None and accrued >= job.max_cost_micros:
            reason = "max_cost"
        elif job.max_runtime_hours is not None and _runtime_hours(job) >= job.max_runtime_hours:
            reason = "max_runtime"
        if reason:
            stop_billing(job)
    if reason:
        services.job_terminate(job=job, reason=reason)


def _runtime_hours(job: Job) -> float:
    now = timezone.now()
    seconds = sum(
        accounted_seconds(a.billing_started_at, a.ended_at or now)
        for a in job.attempts.all()
        if a.billing_started_at is not None
    )
    return seconds / 3600


def enforce_budgets() -> int:
    """Terminate every job not yet ended in a scope whose terminate budget, or whose
    organization's balance, is exhausted. Call after billing live jobs to now. Returns how
    many jobs it asked to end."""
    ended = 0
    for scope in budgets.evaluate():
        jobs = Job.objects.filter(organization_id=scope.organization_id).exclude(
            state__in=[*TERMINAL_STATES, JobState.TERMINATING]
        )
        if scope.project_id is not None:
            jobs = jobs.filter(project_id=scope.project_id)
        for job in jobs:
            with transaction.atomic():
                locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job.pk)
                stop_billing(locked)
                services.job_terminate(job=locked, reason=BUDGET_EXHAUSTED, message=scope.why)
            ended += 1
    return ended
