"""Preemption: standard jobs displace preemptible ones, backends take hardware back, and a
job that lost its hardware waits in `preempted` until it is placed again (docs/preemption.md).

- Displacement: a standard job that finds no free capacity picks the most recently started
  live attempt of a preemptible job on an offer it could use (`displace_for`). The attempt
  is marked (`preempt_requested_at`, `preempted_by`); its runner's next heartbeat answer is
  `checkpoint_and_exit`. Once it has ended, the capacity it held is reserved for the job that
  displaced it (apps.jobs.execution.placement) until that job is placed.
- Reclaims: an operator's or provider's reclaim (`reclaim_attempt`: recorded on the attempt
  before the SIGTERM), a backend poll that says `reclaimed`, a lapsed heartbeat, or a runner
  that vanished. An exit code alone is never a reclaim: a workload that exits 143 when
  neither we nor its provider sent a SIGTERM exited by itself, and fails `exit_code_143`
  (otherwise any workload could run again and again, each short attempt nearly free).
- Either way the attempt ends, the job moves to `preempted` (reason `preempted_by` or
  `reclaimed`) and is dispatched again; the next attempt's runner resumes from the newest
  checkpoint. Preemptions are counted per job, apart from failures: past
  PREEMPTION_MAX_PER_JOB the job fails `too_many_preemptions`.

Every function runs under the job's row lock and re-checks what it is about to do, so a
report that arrives twice, or a task that runs twice, changes nothing the second time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.jobs import enqueue, selectors, services
from apps.jobs.events import JobEventType
from apps.jobs.execution.attempts import end_attempt
from apps.jobs.execution.placement import held_for_others, markets_for, offers_with_free_capacity
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Attempt, Job, MetricPoint, MetricSample
from apps.jobs.states import JobState
from apps.providers.backends import backend_for

if TYPE_CHECKING:
    from apps.jobs.writes import JobWrite

PREEMPTED_BY = "preempted_by"
RECLAIMED = "reclaimed"
TOO_MANY_PREEMPTIONS = "too_many_preemptions"
# States whose attempt placement may displace: launched, and not yet finishing.
DISPLACEABLE_STATES = (JobState.PROVISIONING, JobState.RUNNING)


# -- displacement ------------------------------------------------------------------------


def displace_for(job: Job) -> Attempt | None:
    """For a standard `job` that found no free capacity: mark the attempt it will take the
    place of, and return it; None when nothing can be displaced. A job whose earlier victim
    is still stopping waits for it instead of displacing another. Call under `job`'s lock."""
    if job.priority_class != Job.PriorityClass.STANDARD:
        return None
    pending = Attempt.objects.filter(preempted_by=job, ended_at__isnull=True).first()
    if pending is not None:
        return pending
    offers = {
        offer.pk: offer
        for offer in offers_with_free_capacity(
            accelerator=job.accelerator,
            gpu_count=job.gpu_count,
            max_gpu_price_micros_hr=job.max_price_micros_hr,
            markets=markets_for(job.priority_class),
            min_free=0,
        )
    }
    if not offers:
        return None
    candidates = (
        Attempt.objects.select_related("job")
        .filter(
            offer_id__in=offers,
            ended_at__isnull=True,
            launched_at__isnull=False,
            preempt_requested_at__isnull=True,
            job__priority_class=Job.PriorityClass.PREEMPTIBLE,
            job__state__in=DISPLACEABLE_STATES,
        )
        # The least work lost: not yet started first, then the most recently started.
        .order_by(F("started_at").desc(nulls_first=True), "-allocated_at", "-pk")
    )
    for victim in candidates:
        offer = offers[victim.offer_id]
        if offer.free - held_for_others(offer, job) + victim.gpu_count < job.gpu_count:
            continue
        if _mark_displaced(victim, by=job):
            return victim
    return None


def _mark_displaced(victim: Attempt, *, by: Job) -> bool:
    now = timezone.now()
    marked = Attempt.objects.filter(
        pk=victim.pk, ended_at__isnull=True, preempt_requested_at__isnull=True
    ).update(preempt_requested_at=now, preempted_by=by)
    if not marked:
        return False  # another standard job got there first
    where = victim.provider.name if victim.provider else "its provider"
    by_name = visible_id(by, to=victim.job)
    services.record_event(
        job=victim.job,
        attempt=victim.number,
        type=JobEventType.PREEMPTION_REQUESTED,
        message=f"Displaced by {by_name or 'a standard job'}: checkpointing and stopping.",
        data={"preempted_by": by_name},
    )
    victim_name = visible_id(victim.job, to=by)
    services.record_event(
        job=by,
        attempt=by.attempt_count or None,
        type=JobEventType.PREEMPTING,
        message=f"No free capacity: displacing {victim_name or 'a preemptible job'} on {where}.",
        data={"preempting": victim_name},
    )
    return True


def visible_id(job: Job, *, to: Job) -> str | None:
    """`job`'s id as `to`'s organization may see it: None for another organization's job
    (capacity is shared; the jobs on it are not)."""
    return job.public_id if job.organization_id == to.organization_id else None


def stop_overdue(attempt: Attempt) -> bool:
    """True when a displaced attempt had its time to checkpoint and exit (the runner's own
    SIGUSR1 → SIGTERM → SIGKILL, plus two heartbeats) and is still there."""
    if attempt.preempt_requested_at is None or attempt.terminate_requested_at is not None:
        return False
    allowed = 2 * settings.TERMINATE_GRACE_S + 2 * settings.HEARTBEAT_INTERVAL_S + 5
    return timezone.now() - attempt.preempt_requested_at > timedelta(seconds=allowed)


# -- reclaims ----------------------------------------------------------------------------


class NothingToReclaim(Exception):
    """The job holds no launched hardware right now."""


def reclaim_attempt(job: Job, *, reason: str = RECLAIMED, grace_s: float | None = None) -> Attempt:
    """Take the hardware of `job`'s live attempt back, as a provider reclaiming a spot
    instance does: SIGTERM to the workload from outside, SIGKILL after the grace period. The
    exit that follows moves the job to `preempted` (reason `reclaimed`)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job.pk)
        attempt = (
            Attempt.objects.select_related("provider")
            .filter(job=locked, number=locked.attempt_count, ended_at__isnull=True)
            .exclude(handle={})
            .first()
        )
        if attempt is None or locked.state not in DISPLACEABLE_STATES:
            raise NothingToReclaim(locked.public_id)
        if not attempt.reclaim_reason:
            Attempt.objects.filter(pk=attempt.pk).update(reclaim_reason=reason)
            attempt.reclaim_reason = reason
            services.record_event(
                job=locked,
                attempt=attempt.number,
                type=JobEventType.RECLAIM_REQUESTED,
                message="The provider is taking the hardware back.",
                data={"reason": reason},
            )
    grace = settings.TERMINATE_GRACE_S if grace_s is None else grace_s
    backend_for(attempt.provider).terminate(attempt.handle, grace)
    return attempt


def kill_silent(attempt: Attempt) -> None:
    """A runner whose heartbeat lapsed while its process still runs: treat the host as lost.
    The process group is killed now; its end (next poll) is a reclaim."""
    with transaction.atomic():
        updated = Attempt.objects.filter(
            pk=attempt.pk, ended_at__isnull=True, reclaim_reason=""
        ).update(reclaim_reason="heartbeat_lost", terminate_requested_at=timezone.now())
        if updated:
            services.record_event(
                job=attempt.job,
                attempt=attempt.number,
                type=JobEventType.HEARTBEAT_LOST,
                message="No heartbeat from the runner in time: stopping it as lost.",
            )
    if updated:
        backend_for(attempt.provider).terminate(attempt.handle, 0)


# -- the outcome -------------------------------------------------------------------------


def preemption_reason(job: Job, attempt: Attempt, exit_code: int | None) -> str | None:
    """Why this attempt's end is a preemption (`preempted_by` or `reclaimed`), or None when
    it ended on its own (then its exit code decides the job's fate). Only what this side
    recorded counts: a displacement (`preempt_requested_at`) or a reclaim
    (`reclaim_reason`, set by `reclaim_attempt`, `kill_silent`, or a backend that reports
    one). The exit code, whatever it is, never makes an end a reclaim."""
    if job.state not in DISPLACEABLE_STATES:
        return None
    if attempt.preempt_requested_at is not None:
        return None if hooks_for(job).exit_is_final(job, attempt, exit_code) else PREEMPTED_BY
    if attempt.reclaim_reason:
        return RECLAIMED
    # Not a bare exit 143: the workload can exit so (or SIGTERM itself, or its runner) at
    # will; only a reclaim recorded before the signal counts.
    return None


def preempt(job: Job, attempt: Attempt, *, reason: str, detail: str = "", message: str = "") -> Job:
    """End `attempt` and move its job to `preempted`, then back in line for placement, or to
    `failed` past the cap. Call under the job's row lock with `attempt` its live attempt."""
    by = visible_id(attempt.preempted_by, to=job) if attempt.preempted_by_id else None
    end_attempt(attempt, reason="preempted" if reason == PREEMPTED_BY else reason)
    count = job.preemption_count + 1
    Job.objects.filter(pk=job.pk).update(preemption_count=count, queued_at=timezone.now())
    if reason == PREEMPTED_BY:
        message = (
            f"Preempted by {by or 'a standard job of another organization'}; "
            "it will resume from its last checkpoint."
        )
        data = {"preempted_by": by}
    else:
        message = message or "The hardware was reclaimed; it will resume from its last checkpoint."
        data = {"detail": detail or attempt.reclaim_reason or RECLAIMED}
    job = services.job_transition(
        job_id=job.pk, to=JobState.PREEMPTED, reason=reason, message=message, data=data
    )
    if count > settings.PREEMPTION_MAX_PER_JOB:
        text = f"Preempted {count} times (at most {settings.PREEMPTION_MAX_PER_JOB}): giving up."
        return services.job_transition(
            job_id=job.pk,
            to=JobState.FAILED,
            reason=TOO_MANY_PREEMPTIONS,
            message=text,
            error_message=text,
        )
    enqueue.dispatch_on_commit(job.pk)
    if attempt.preempted_by_id:
        enqueue.dispatch_on_commit(attempt.preempted_by_id)
    return job


# -- the next attempt --------------------------------------------------------------------


def record_resume(write: JobWrite, attempt: Attempt, resumed_from_step: int | None) -> None:
    """The runner of a later attempt started: say where its workload resumes (an event of
    `write`, the job's write of the start), and supersede the metric points of earlier
    attempts that it trains again. Call under the job's lock."""
    if attempt.number == 1:
        return
    job = write.job
    step = resumed_from_step or 0
    MetricPoint.objects.filter(
        job=job, attempt__lt=attempt.number, step__gt=step, superseded=False
    ).update(superseded=True)
    if MetricSample.objects.filter(
        job=job, attempt__lt=attempt.number, step__gt=step, superseded=False
    ).update(superseded=True):
        write.set(metric_series=selectors.metric_series(job))
    if resumed_from_step is None:
        kind = JobEventType.RESTARTED_FROM_BEGINNING
        message = "No checkpoint to resume from: the workload starts from the beginning."
    else:
        kind, message = (
            JobEventType.RESUMED_FROM_CHECKPOINT,
            f"Resumed from the checkpoint at step {step}.",
        )
    write.event(attempt=attempt.number, type=kind, message=message, data={"step": step})
