"""The attempt kernel that dispatch, preemption and supervision share: find and lock a job's
current attempt, end an attempt, and bill attempts in whole minutes.

Billing: each attempt is billed in whole minutes from the moment the provider gave it its
hardware (`billing_started_at`: placement on a host, the first run after a batch queue) at
the price captured at placement (`attempt.price_micros_hr` is for the whole allocation per
hour), and at least one minute once it has hardware: an allocation is never free, however
soon it ends (so a workload cannot run for nothing in a loop of short attempts). An attempt
that only ever waited in a provider's queue costs nothing. Accounted time is wall time times
TRAINYARD_CLOCK_SCALE (1 in production).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from apps.billing import usage
from apps.core.bulk import update_rows
from apps.jobs import enqueue
from apps.jobs.execution import capacity
from apps.jobs.kinds import hooks_for
from apps.jobs.live import push
from apps.jobs.models import Attempt, Job
from apps.providers.backends import backend_for

# Every attempt, from its allocation on, is billed at least this many minutes.
MIN_BILLED_MINUTES = 1


class AttemptSuperseded(Exception):
    """A report about an attempt that is no longer the job's live one."""


def current_attempt(job: Job) -> Attempt | None:
    """The job's live attempt (not yet ended), with its provider; None when it has none."""
    return (
        Attempt.objects.select_related("provider")
        .filter(job=job, number=job.attempt_count, ended_at__isnull=True)
        .first()
    )


def accounted_seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds()) * settings.TRAINYARD_CLOCK_SCALE


def start_billing(job: Job, attempt: Attempt, now: datetime | None = None) -> bool:
    """The provider gave `attempt` its hardware: bill it from now on (and count it in the
    burn rate). Call under the job's row lock; True when billing started here."""
    if attempt.billing_started_at is not None or attempt.ended_at is not None:
        return False
    now = now or timezone.now()
    updated = Attempt.objects.filter(pk=attempt.pk, billing_started_at__isnull=True).update(
        billing_started_at=now, queue_reason=""
    )
    if not updated:
        return False
    attempt.billing_started_at = now
    attempt.queue_reason = ""
    meter(job, attempt)
    return True


def billable_minutes(attempt: Attempt, now: datetime) -> int:
    """The whole minutes `attempt` owes at `now`: from `billing_started_at` to its end (or
    now), no further than `billed_until`, at least MIN_BILLED_MINUTES. Call only for an
    attempt whose billing started."""
    end = min(attempt.ended_at or now, attempt.billed_until or now)
    seconds = accounted_seconds(attempt.billing_started_at, end)
    return max(MIN_BILLED_MINUTES, int(seconds // 60))


def bill(job: Job, now: datetime | None = None) -> int:
    """Bring every attempt's billed minutes up to date, post what they added to the ledger
    and store the job's accrued spend (always the sum of its usage transfers). Call under the
    job's row lock. Returns the job's accrued micro-dollars.

    Writes only what changed: an attempt is updated and metered when its whole minutes
    moved (usage is posted per minute, so between two minute boundaries there is nothing to
    post), the job when its spend moved. A live attempt whose minutes did not move is only
    metered when it has no meter yet (the burn rate counts open meters; allocation and
    `start_billing` open one, so this is for an attempt billed before either did)."""
    now = now or timezone.now()
    total = 0
    unchanged_live: list[Attempt] = []
    for attempt in job.attempts.all():
        if attempt.billing_started_at is None:
            continue  # it never had hardware (waited in a provider's queue): free
        minutes = billable_minutes(attempt, now)
        if minutes != attempt.billed_minutes:
            attempt.billed_minutes = minutes
            Attempt.objects.filter(pk=attempt.pk).update(billed_minutes=minutes)
            meter(job, attempt)
        elif attempt.ended_at is None:
            unchanged_live.append(attempt)
        total += attempt.cost_micros
    if unchanged_live:
        metered = usage.metered([attempt.pk for attempt in unchanged_live])
        for attempt in unchanged_live:
            if attempt.pk not in metered:
                meter(job, attempt)
    if total != job.accrued_micros:
        job.accrued_micros = total
        Job.objects.filter(pk=job.pk).update(accrued_micros=total)
        # The job page's cost and attempts, and the job's row in the lists, follow each
        # billed minute, not only state changes.
        push.push_on_commit(job=job, seq=push.bump_live_seq(job.pk), state_changed=True)
    return total


def bill_many(jobs: list[Job], now: datetime) -> dict[int, list[Attempt]]:
    """`bill` of each job (all locked by the caller, in one transaction), with the writes
    of all of them together: one query for their attempts, one UPDATE for the attempts
    whose minutes moved, their usage through `usage.record_many`, one UPDATE for the jobs
    whose spend moved and one for their live sequences. Sets each job's `accrued_micros`;
    returns each job's attempts, as billed."""
    by_job: dict[int, list[Attempt]] = {job.pk: [] for job in jobs}
    for attempt in Attempt.objects.filter(job_id__in=by_job).order_by("job_id", "number"):
        by_job[attempt.job_id].append(attempt)
    moved, readings, unchanged_live = [], [], []
    for job in jobs:
        for attempt in by_job[job.pk]:
            if attempt.billing_started_at is None:
                continue
            minutes = billable_minutes(attempt, now)
            if minutes != attempt.billed_minutes:
                attempt.billed_minutes = minutes
                moved.append(attempt)
                readings.append(_reading(job, attempt))
            elif attempt.ended_at is None:
                unchanged_live.append((job, attempt))
    if unchanged_live:
        metered = usage.metered([attempt.pk for _, attempt in unchanged_live])
        readings += [_reading(job, a) for job, a in unchanged_live if a.pk not in metered]
    if moved:
        update_rows(moved, ["billed_minutes"])
    usage.record_many(readings)
    spent = []
    for job in jobs:
        total = sum(a.cost_micros for a in by_job[job.pk] if a.billing_started_at is not None)
        if total != job.accrued_micros:
            job.accrued_micros = total
            spent.append(job)
    if spent:
        update_rows(spent, ["accrued_micros"])
        seqs = push.bump_live_seqs({job.pk: [(0, 0)] for job in spent})
        push.push_states_on_commit([(job, seqs[job.pk][0]) for job in spent])
    return by_job


def _reading(job: Job, attempt: Attempt) -> dict:
    """`meter`'s reading of the attempt (`usage.record`'s arguments, one of
    `usage.record_many`'s readings)."""
    return {
        **_meter_fields(job, attempt),
        "billed_minutes": attempt.billed_minutes,
        "ended_at": attempt.ended_at,
    }


def meter(job: Job, attempt: Attempt) -> None:
    """Tell billing where the attempt stands: its price, its minutes so far, whether it has
    ended (its meter then stops counting towards the burn rate)."""
    usage.record(**_reading(job, attempt))


def open_meter(job: Job, attempt: Attempt) -> None:
    """`meter` for an attempt allocated in the caller's transaction: its meter is new."""
    usage.open_meter(**_meter_fields(job, attempt))


def _meter_fields(job: Job, attempt: Attempt) -> dict:
    """What identifies an attempt's meter and prices it."""
    resource_type, resource_id, resource_name = hooks_for(job).usage_resource(job)
    return {
        "attempt_id": attempt.pk,
        "job_id": job.pk,
        "organization_id": job.organization_id,
        "project_id": job.project_id,
        "resource_type": resource_type,
        "resource_id": resource_id,
        "resource_name": resource_name,
        "price_micros_hr": attempt.price_micros_hr,
    }


def stop_billing(job: Job, now: datetime | None = None) -> None:
    """Bill the job to `now` and bill its live attempt no further (a limit or a budget is
    ending it). Call under the job's row lock."""
    now = now or timezone.now()
    bill(job, now)
    Attempt.objects.filter(job=job, ended_at__isnull=True, billed_until__isnull=True).update(
        billed_until=now
    )


def end_attempt(attempt: Attempt, *, reason: str, exit_code: int | None = None) -> None:
    """Close an attempt (its capacity is free from now on) and bill it to the end. Call
    under the job's row lock; idempotent."""
    if attempt.ended_at is not None:
        return
    attempt.ended_at = timezone.now()
    attempt.end_reason = reason
    if attempt.exit_code is None and exit_code is not None:
        attempt.exit_code = exit_code
    attempt.save(update_fields=["ended_at", "end_reason", "exit_code"])
    capacity.freed_on_commit()
    job = Job.objects.get(pk=attempt.job_id)
    bill(job)
    if attempt.billing_started_at is not None:
        meter(job, attempt)
    if attempt.handle:
        # In a worker, never here: this may be a runner's own request (its `spec`, its
        # `exit`), and a provider's release takes as long as `podman rm --force`.
        enqueue.release_on_commit(attempt.pk)


def release(attempt_id: int) -> None:
    """Give back what the ended attempt holds at its provider (its container, what is left
    of its process group). Idempotent; a live attempt is left alone."""
    attempt = Attempt.objects.select_related("provider").filter(pk=attempt_id).first()
    if attempt is None or attempt.ended_at is None or not attempt.handle:
        return
    backend_for(attempt.provider).release(attempt.handle)


def lock_current(attempt_id: int) -> tuple[Job, Attempt]:
    """The job and attempt, the job's row locked; raises AttemptSuperseded when the
    attempt is not the job's current one."""
    attempt = Attempt.objects.select_related("provider").get(pk=attempt_id)
    job = (
        Job.objects.select_for_update(of=("self",), no_key=True)
        .select_related("project")
        .get(pk=attempt.job_id)
    )
    attempt.refresh_from_db()
    if attempt.number != job.attempt_count:
        raise AttemptSuperseded(attempt.pk)
    return job, attempt
