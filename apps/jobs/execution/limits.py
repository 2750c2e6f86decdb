"""Limits: bill a live job to now and terminate it when its `max_cost_usd` or
`max_runtime_hours` binds, or when a budget over it (or its organization's balance) is
exhausted (apps.billing.budgets decides which). Limits end a job at once, with no grace:
the reference platform gives none on a binding limit.

Reconcile's pass calls `enforce_live_limits`: two queries read every live job and its
billed attempts, and only the jobs where something is due (a whole minute accrued, an end
not yet billed, a meter to open, a limit reached) are locked and billed by `enforce_limits`.
Usage is posted per whole minute, so a job between two minute boundaries has nothing to
write: skipping it posts exactly what billing it would have posted (nothing)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Q
from django.utils import timezone

from apps.billing import budgets, usage
from apps.jobs import services
from apps.jobs.execution.attempts import (
    MIN_BILLED_MINUTES,
    accounted_seconds,
    bill,
    bill_many,
    billable_minutes,
    stop_billing,
)
from apps.jobs.models import Attempt, Job
from apps.jobs.states import TERMINAL_STATES, JobState

LIVE_JOB_STATES = (
    JobState.ALLOCATING,
    JobState.PROVISIONING,
    JobState.RUNNING,
    JobState.FINALIZING,
    JobState.TERMINATING,
)
# Live, but ending already: billed to now, never terminated by a limit.
ENDING_STATES = frozenset({JobState.TERMINATING, JobState.FINALIZING})
BUDGET_EXHAUSTED = "budget_exhausted"
NO_GRACE_REASONS = frozenset({"max_runtime", "max_cost", BUDGET_EXHAUSTED})


def grace_for(reason: str | None) -> float:
    return 0.0 if reason in NO_GRACE_REASONS else settings.TERMINATE_GRACE_S


def enforce_limits(job_id: int, *, skip_locked: bool = False) -> bool:
    """Bill the job to now and terminate it when a limit binds. With `skip_locked`, a job
    whose row another transaction holds right now (its runner's log batch, a transition) is
    left alone: the reconcile pass takes it up again next time, and no minute is lost, since
    a bill posts every minute owed. Returns whether it billed the job."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",), no_key=True, skip_locked=skip_locked)
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.state not in LIVE_JOB_STATES:
            return False
        now = timezone.now()
        accrued = bill(job, now)
        if job.state in ENDING_STATES:
            return True
        reason = _binding_limit(job, accrued, job.attempts.all(), now)
        if reason:
            stop_billing(job)
    if reason:
        services.job_terminate(job=job, reason=reason)
    return True


def enforce_live_limits(now: datetime | None = None, batch: int | None = None) -> int:
    """`enforce_limits` for the live jobs where something is due now, and for no other:
    one query for the live jobs, one for their attempts that have had hardware, then the
    decision in memory, by the same rules as `bill` and `enforce_limits`. Due: an attempt
    whose billable whole minutes differ from its billed ones (a minute accrued, or its end
    not yet billed), a live attempt without a meter, a job whose accrued spend is not the
    sum of its attempts' costs, or a job not yet ending whose cost or runtime limit binds.

    At most `batch` jobs a pass (RECONCILE_BILLING_BATCH), most urgent first: a limit that
    binds, then what must be settled (an ended attempt, a meter to open, a spend out of
    step), then the jobs furthest behind. Each bill posts every whole minute owed, so a job
    left for the next pass loses nothing: its minutes are posted a pass later, and a pass
    stays bounded however many jobs are live. A job whose row is held at that moment is
    skipped and billed a pass later. Returns how many jobs it billed."""
    now = now or timezone.now()
    batch = settings.RECONCILE_BILLING_BATCH if batch is None else batch
    jobs = list(
        Job.objects.filter(state__in=LIVE_JOB_STATES)
        .order_by("pk")
        .only("pk", "state", "accrued_micros", "max_cost_micros", "max_runtime_hours")
    )
    billed: dict[int, list[Attempt]] = {}
    rows = (
        Attempt.objects.filter(job__state__in=LIVE_JOB_STATES, billing_started_at__isnull=False)
        .annotate(metered=usage.has_meter(OuterRef("pk")))
        .order_by("job_id", "number")
        .only(
            "pk",
            "job_id",
            "number",
            "price_micros_hr",
            "billing_started_at",
            "ended_at",
            "billed_until",
            "billed_minutes",
        )
    )
    for attempt in rows:
        billed.setdefault(attempt.job_id, []).append(attempt)
    urgent = []
    for job in jobs:
        urgency = _urgency(job, billed.get(job.pk, []), now)
        if urgency is not None:
            urgent.append((urgency, job.pk))
    due = sorted(urgent)[:batch]
    behind = [job_id for (urgency, _), job_id in due if urgency == BEHIND]
    one_by_one = [job_id for (urgency, _), job_id in due if urgency != BEHIND]
    if connection.vendor != "postgresql":  # SQLite (`make run`): each on its own
        one_by_one, behind = one_by_one + behind, []
    # A pass never waits on a job's row: one held (a log batch being stored; a relay's
    # bundle holds dozens at once) is billed next pass.
    billed = sum(enforce_limits(job_id, skip_locked=True) for job_id in one_by_one)
    return billed + _bill_behind(behind, now)


def _bill_behind(job_ids: list[int], now: datetime) -> int:
    """Bill the jobs that are only minutes behind (no limit binds, nothing to settle: the
    common case, about one job in sixty every second at scale) together, in one transaction
    (`attempts.bill_many`); a limit that binds once billed is enforced job by job. Rows held
    by another transaction are skipped, as `enforce_limits` skips them. Returns how many
    jobs it billed."""
    if not job_ids:
        return 0
    with transaction.atomic():
        jobs = list(
            Job.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
            .filter(pk__in=job_ids, state__in=LIVE_JOB_STATES)
            .select_related("project")  # each job's push names its project's group
            .order_by("pk")
        )
        attempts = bill_many(jobs, now)
    binding = [
        job.pk
        for job in jobs
        if job.state not in ENDING_STATES
        and _binding_limit(job, job.accrued_micros, attempts[job.pk], now)
    ]
    for job_id in binding:
        enforce_limits(job_id, skip_locked=True)
    return len(jobs)


BINDS, SETTLE, BEHIND = 0, 1, 2  # `_urgency`'s classes, most urgent first


def _urgency(job: Job, attempts: list[Attempt], now: datetime) -> tuple[int, int] | None:
    """None when `enforce_limits(job)` at `now` would write nothing and end nothing; else
    its place in the pass's order: (BINDS, 0) a limit binds at the spend billing would
    bring, (SETTLE, 0) an ended attempt to bill to its end, a meter to open or a spend out
    of step, (BEHIND, -minutes) minutes accrued, the most first."""
    behind, settle, accrued, owed = 0, False, 0, 0
    for attempt in attempts:
        minutes = billable_minutes(attempt, now)
        if minutes != attempt.billed_minutes:
            behind += abs(minutes - attempt.billed_minutes)
            settle = settle or attempt.ended_at is not None
        if attempt.ended_at is None and not attempt.metered:
            settle = True
        accrued += attempt.cost_micros
        owed += minutes * attempt.price_micros_hr // 60
    settle = settle or accrued != job.accrued_micros
    if job.state not in ENDING_STATES and _binding_limit(job, owed, attempts, now):
        return (BINDS, 0)
    if settle:
        return (SETTLE, 0)
    return (BEHIND, -behind) if behind else None


def _binding_limit(
    job: Job, accrued: int, attempts: Iterable[Attempt], now: datetime
) -> str | None:
    """The limit of the job that binds with `accrued` spent by `now`, if any."""
    if job.max_cost_micros is not None and accrued >= job.max_cost_micros:
        return "max_cost"
    if job.max_runtime_hours is not None and _runtime_hours(attempts, now) >= job.max_runtime_hours:
        return "max_runtime"
    return None


def _runtime_hours(attempts: Iterable[Attempt], now: datetime) -> float:
    seconds = sum(
        accounted_seconds(a.billing_started_at, a.ended_at or now)
        for a in attempts
        if a.billing_started_at is not None
    )
    return seconds / 3600


def enforce_budgets(now: datetime | None = None) -> int:
    """End every job not yet ended in a scope whose terminate budget, or whose
    organization's balance, is exhausted: a waiting one now; a running one at the end of
    the last minute the scope pays for (its minutes billed so far, plus the scope's
    `minutes_left`), never inside a minute it paid for. Until then its billing stops there
    (`billed_until`) and it runs on; the pass that finds that moment gone ends it. A job
    whose scope can pay again (a budget raised, credits granted) bills on. Call after
    billing live jobs to now. Returns how many jobs it asked to end. One query finds the
    jobs of every exhausted scope; each is then locked and decided on its own."""
    now = now or timezone.now()
    scopes = budgets.evaluate(now)
    in_scopes = Q()
    for scope in scopes:
        match = Q(organization_id=scope.organization_id)
        if scope.project_id is not None:
            match &= Q(project_id=scope.project_id)
        in_scopes |= match
    jobs = (
        list(
            Job.objects.filter(in_scopes)
            .exclude(state__in=[*TERMINAL_STATES, JobState.TERMINATING])
            .values_list("pk", "organization_id", "project_id")
        )
        if scopes
        else []
    )
    _lift_stops(exclude={job_id for job_id, _, _ in jobs})
    ended = 0
    for job_id, organization_id, project_id in jobs:
        scope = min(
            (
                scope
                for scope in scopes
                if scope.organization_id == organization_id
                and scope.project_id in (None, project_id)
            ),
            key=lambda scope: scope.minutes_left,
        )
        with transaction.atomic():
            locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job_id)
            if locked.is_terminal or locked.state in ENDING_STATES:
                continue
            bill(locked, now)
            end = _paid_until(locked, scope.minutes_left)
            _bill_no_further(locked, end or now)
            if end is not None and end > now:
                continue  # it runs to the end of what it paid for; a later pass ends it
            bill(locked, now)
            services.job_terminate(job=locked, reason=BUDGET_EXHAUSTED, message=scope.why)
        ended += 1
    return ended


def _lift_stops(*, exclude: set[int]) -> None:
    """Bill on the running jobs a budget was to stop whose scope is no longer exhausted
    (not in `exclude`): a stop set on a job not yet ending is a budget's."""
    stopped = (
        Attempt.objects.filter(ended_at__isnull=True, billed_until__isnull=False)
        .exclude(job__state__in=[*TERMINAL_STATES, *ENDING_STATES])
        .exclude(job_id__in=exclude)
        .values_list("job_id", flat=True)
    )
    for job_id in stopped:
        with transaction.atomic():
            locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job_id)
            if not (locked.is_terminal or locked.state in ENDING_STATES):
                Attempt.objects.filter(job=locked, ended_at__isnull=True).update(billed_until=None)


def _paid_until(job: Job, extra_minutes: int) -> datetime | None:
    """When the minutes billed so far of the job's live attempt end, `extra_minutes` more
    included (never after a stop already set); None when no live attempt is billed. The
    first minute is billed at allocation: a job inside it is inside a paid minute."""
    attempt = (
        Attempt.objects.filter(job=job, ended_at__isnull=True, billing_started_at__isnull=False)
        .only("billing_started_at", "billed_minutes", "billed_until")
        .first()
    )
    if attempt is None:
        return None
    minutes = max(attempt.billed_minutes, MIN_BILLED_MINUTES) + extra_minutes
    end = attempt.billing_started_at + timedelta(
        seconds=minutes * 60 / settings.TRAINYARD_CLOCK_SCALE
    )
    return end if attempt.billed_until is None else min(end, attempt.billed_until)


def _bill_no_further(job: Job, until: datetime) -> None:
    """Bill the job's live attempt no further than `until` (a stop already set earlier
    stands). `until` never falls inside the minutes already billed: `_paid_until` starts
    from them."""
    Attempt.objects.filter(job=job, ended_at__isnull=True).filter(
        Q(billed_until__isnull=True) | Q(billed_until__gt=until)
    ).update(billed_until=until)
