"""Supervision: what happens to a job after its runner starts, and the reconcile loop.

The runner tells us what it does (started, heartbeats, exited); the backend tells us what
became of the process (`poll`). Either may be first or be missing: every function here checks
the job's state under its row lock and only takes the step that is still due, so reports that
arrive twice, late or out of order change nothing.

Billing: each attempt is billed in whole minutes from its allocation at the price captured
then (`attempt.price_micros_hr` is for the whole allocation per hour). Accounted time is wall
time times TRAINYARD_CLOCK_SCALE (1 in production).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.transactions import after_commit
from apps.jobs import preemption, services
from apps.jobs.finetune import GRADING_FAILED_EXIT
from apps.jobs.models import Attempt, Job, LogLine
from apps.jobs.states import JobState
from apps.providers.backends import backend_for

logger = logging.getLogger(__name__)

LIVE_JOB_STATES = (
    JobState.ALLOCATING,
    JobState.PROVISIONING,
    JobState.RUNNING,
    JobState.FINALIZING,
    JobState.TERMINATING,
)
# Limits end a job at once: the reference platform gives no grace on a binding limit.
NO_GRACE_REASONS = frozenset({"max_runtime", "max_cost", "budget_exhausted"})


class AttemptSuperseded(Exception):
    """A report about an attempt that is no longer the job's live one."""


def accounted_seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds()) * settings.TRAINYARD_CLOCK_SCALE


def bill(job: Job, now: datetime | None = None) -> int:
    """Bring every attempt's billed minutes up to date and store the job's accrued spend.
    Call under the job's row lock. Returns the job's accrued micro-dollars."""
    now = now or timezone.now()
    total = 0
    for attempt in job.attempts.all():
        end = attempt.ended_at or now
        minutes = int(accounted_seconds(attempt.allocated_at, end) // 60)
        if minutes != attempt.billed_minutes:
            attempt.billed_minutes = minutes
            Attempt.objects.filter(pk=attempt.pk).update(billed_minutes=minutes)
        total += attempt.cost_micros
    if total != job.accrued_micros:
        job.accrued_micros = total
        Job.objects.filter(pk=job.pk).update(accrued_micros=total)
    return total


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
    bill(Job.objects.get(pk=attempt.job_id))
    if attempt.handle:
        provider = attempt.provider
        handle = attempt.handle
        after_commit(_release, provider, handle)


def _release(provider, handle) -> None:
    backend_for(provider).release(handle)


def _lock_current(attempt_id: int) -> tuple[Job, Attempt]:
    """The job and attempt, the job's row locked; raises AttemptSuperseded when the
    attempt is not the job's current one."""
    attempt = Attempt.objects.select_related("provider").get(pk=attempt_id)
    job = (
        Job.objects.select_for_update(of=("self",)).select_related("project").get(pk=attempt.job_id)
    )
    attempt.refresh_from_db()
    if attempt.number != job.attempt_count:
        raise AttemptSuperseded(attempt.pk)
    return job, attempt


def order_for(job: Job, attempt: Attempt) -> str:
    """The order a runner's heartbeat answer carries."""
    if attempt.ended_at is not None or job.state == JobState.TERMINATING:
        return "terminate"
    if attempt.preempt_requested_at is not None:
        return "checkpoint_and_exit"
    return "continue"


def runner_started(attempt_id: int, resumed_from_step: int | None = None) -> str:
    """The runner started the workload (`resumed_from_step`: the checkpoint step it
    resumes from, None when it starts from the beginning)."""
    with transaction.atomic():
        job, attempt = _lock_current(attempt_id)
        if attempt.ended_at is not None:
            raise AttemptSuperseded(attempt.pk)
        if attempt.started_at is None:
            attempt.started_at = timezone.now()
            attempt.last_heartbeat_at = attempt.started_at
            attempt.save(update_fields=["started_at", "last_heartbeat_at"])
            services.record_event(
                job=job,
                attempt=attempt.number,
                type="workload_started",
                message="The workload started.",
            )
            preemption.record_resume(job, attempt, resumed_from_step)
        if job.state == JobState.PROVISIONING:
            job = services.job_transition(job_id=job.pk, to=JobState.RUNNING)
        return order_for(job, attempt)


def runner_heartbeat(attempt_id: int) -> str:
    attempt = Attempt.objects.get(pk=attempt_id)
    job = Job.objects.only("state", "attempt_count").get(pk=attempt.job_id)
    if attempt.number != job.attempt_count or attempt.ended_at is not None:
        raise AttemptSuperseded(attempt.pk)
    Attempt.objects.filter(pk=attempt.pk).update(last_heartbeat_at=timezone.now())
    return order_for(job, attempt)


def runner_exited(attempt_id: int, exit_code: int) -> None:
    """Record the workload's exit code (from the runner or the backend's poll) and move the
    job on: to `preempted` when the attempt was displaced or reclaimed, else towards its
    final state, which `finalize` sets after releasing the hardware."""
    with transaction.atomic():
        job, attempt = _lock_current(attempt_id)
        if attempt.ended_at is not None:
            return
        if attempt.exit_code is None:
            attempt.exit_code = exit_code
            attempt.save(update_fields=["exit_code"])
            services.record_event(
                job=job,
                attempt=attempt.number,
                type="workload_exited",
                message=f"The workload exited with code {exit_code}.",
                data={"exit_code": exit_code},
            )
        reason = preemption.preemption_reason(job, attempt, attempt.exit_code)
        if reason is not None:
            preemption.preempt(job, attempt, reason=reason)
            return
        if job.state == JobState.PROVISIONING:
            job = services.job_transition(job_id=job.pk, to=JobState.RUNNING)
        if job.state == JobState.RUNNING:
            services.job_transition(job_id=job.pk, to=JobState.FINALIZING)
        after_commit(_enqueue_finalize, job.pk)


def _enqueue_finalize(job_id: int) -> None:
    from apps.jobs.tasks import finalize_job

    finalize_job.delay(job_id)


def finalize(job_id: int) -> None:
    """Finish a job whose workload has ended: `finalizing` → succeeded/failed by exit code;
    `terminating` → terminated once the runner is gone or has reported its exit."""
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None:
            return
        attempt = job.attempts.select_related("provider").filter(number=job.attempt_count).first()
        if job.state == JobState.FINALIZING and attempt is not None:
            code = attempt.exit_code if attempt.exit_code is not None else -1
            end_attempt(attempt, reason=f"exit_code_{code}", exit_code=code)
            if code == 0:
                services.job_transition(job_id=job.pk, to=JobState.SUCCEEDED, exit_code=0)
            else:
                services.job_transition(
                    job_id=job.pk,
                    to=JobState.FAILED,
                    reason=_failure_reason(job, code),
                    exit_code=code,
                    error_message=_error_tail(job, attempt),
                    message=f"The workload failed with exit code {code}.",
                )
        elif job.state == JobState.TERMINATING and (
            attempt is None
            or attempt.exit_code is not None
            or attempt.ended_at is not None
            or _never_launched(attempt)
        ):
            _terminated(job, attempt)


def _never_launched(attempt: Attempt) -> bool:
    """Terminated between allocation and launch: no runner was started, and none will be
    (launch skips terminating jobs) once a launch in flight has had LAUNCH_STALL_S."""
    stall = timezone.now() - timedelta(seconds=settings.LAUNCH_STALL_S)
    return attempt.launched_at is None and attempt.allocated_at < stall


def _failure_reason(job: Job, exit_code: int) -> str:
    if job.kind == Job.Kind.FINETUNE and exit_code == GRADING_FAILED_EXIT:
        return "grading_failed"
    return f"exit_code_{exit_code}"


def _terminated(job: Job, attempt: Attempt | None) -> None:
    if attempt is not None:
        end_attempt(attempt, reason=job.reason or "terminated")
    exit_code = attempt.exit_code if attempt is not None else None
    services.job_transition(
        job_id=job.pk, to=JobState.TERMINATED, reason=job.reason, exit_code=exit_code
    )


def _error_tail(job: Job, attempt: Attempt, lines: int = 5) -> str:
    tail = (
        LogLine.objects.filter(
            job=job,
            attempt=attempt.number,
            stream=LogLine.Stream.STDERR,
            source=LogLine.Source.USER,
        )
        .order_by("-id")
        .values_list("message", flat=True)[:lines]
    )
    return "\n".join(reversed(list(tail)))


def grace_for(reason: str | None) -> float:
    return 0.0 if reason in NO_GRACE_REASONS else settings.TERMINATE_GRACE_S


def supervise(attempt_id: int) -> None:
    """One reconcile step for a launched, live attempt: poll it and act on what it says."""
    attempt = Attempt.objects.select_related("provider", "job").get(pk=attempt_id)
    job = attempt.job
    if attempt.ended_at is not None or not attempt.handle:
        return
    backend = backend_for(attempt.provider)
    if job.state == JobState.TERMINATING and attempt.terminate_requested_at is None:
        backend.terminate(attempt.handle, grace_for(job.reason))
        Attempt.objects.filter(pk=attempt.pk).update(terminate_requested_at=timezone.now())
    elif preemption.stop_overdue(attempt):
        backend.terminate(attempt.handle, settings.TERMINATE_GRACE_S)
        Attempt.objects.filter(pk=attempt.pk).update(terminate_requested_at=timezone.now())
    result = backend.poll(attempt.handle)
    if result.state == "running":
        if job.state != JobState.TERMINATING and _heartbeat_lapsed(attempt):
            preemption.kill_silent(attempt)
        return
    if result.state == "exited" and result.exit_code is not None:
        try:
            runner_exited(attempt.pk, result.exit_code)
        except AttemptSuperseded:
            return
        finalize(job.pk)
        return
    if job.state == JobState.TERMINATING:
        finalize_terminating_without_runner(job.pk)
        return
    # Gone without an exit record: make sure nothing of it is left before a new attempt.
    backend.release(attempt.handle)
    _lost(attempt.pk, result.state, result.detail or "The workload was lost.")


def finalize_terminating_without_runner(job_id: int) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).get(pk=job_id)
        if job.state != JobState.TERMINATING:
            return
        attempt = job.attempts.select_related("provider").filter(number=job.attempt_count).first()
        _terminated(job, attempt)


def _heartbeat_lapsed(attempt: Attempt) -> bool:
    last = attempt.last_heartbeat_at or attempt.launched_at
    return last is not None and timezone.now() - last > timedelta(
        seconds=settings.HEARTBEAT_TIMEOUT_S
    )


def _lost(attempt_id: int, reason: str, message: str) -> None:
    """The workload is gone without an exit: a running job's hardware was reclaimed (it is
    preempted and placed again); a terminating one is terminated; one that was already
    finishing fails."""
    with transaction.atomic():
        try:
            job, attempt = _lock_current(attempt_id)
        except AttemptSuperseded:
            return
        if attempt.ended_at is not None or job.is_terminal:
            return
        services.record_event(
            job=job,
            attempt=attempt.number,
            type="workload_lost",
            message=message,
            data={"reason": reason},
        )
        if job.state in preemption.DISPLACEABLE_STATES:
            preemption.preempt(job, attempt, reason=preemption.RECLAIMED, detail=reason)
            return
        end_attempt(attempt, reason=reason)
        if job.state == JobState.RUNNING:
            job = services.job_transition(job_id=job.pk, to=JobState.FINALIZING)
        target = JobState.TERMINATED if job.state == JobState.TERMINATING else JobState.FAILED
        services.job_transition(
            job_id=job.pk,
            to=target,
            reason=job.reason if target == JobState.TERMINATED else reason,
            message=message,
            error_message=message,
        )


def enforce_limits(job_id: int) -> None:
    """Bill the job to now and terminate it when a limit binds."""
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
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
        services.job_terminate(job=job, reason=reason)


def _runtime_hours(job: Job) -> float:
    now = timezone.now()
    seconds = sum(accounted_seconds(a.allocated_at, a.ended_at or now) for a in job.attempts.all())
    return seconds / 3600


def reconcile() -> dict[str, int]:
    """One pass of supervision. Cheap when nothing changes: a few indexed queries, then one
    poll per live attempt. Returns what it did, for logs and tests."""
    from apps.jobs.tasks import dispatch_job

    now = timezone.now()
    stall = now - timedelta(seconds=settings.LAUNCH_STALL_S)
    to_dispatch = list(
        Job.objects.filter(
            Q(state__in=[JobState.REQUESTED, JobState.PREEMPTED])
            | Q(
                state__in=[JobState.ALLOCATING, JobState.PROVISIONING],
                allocated_at__lt=stall,
                attempts__launched_at__isnull=True,
                attempts__ended_at__isnull=True,
            )
        )
        .values_list("pk", flat=True)
        .distinct()[:500]
    )
    for job_id in to_dispatch:
        dispatch_job.delay(job_id)

    live = list(
        Attempt.objects.filter(ended_at__isnull=True, launched_at__isnull=False).values_list(
            "pk", flat=True
        )
    )
    for attempt_id in live:
        try:
            supervise(attempt_id)
        except Exception:  # one broken attempt must not stop supervision of the others
            logger.exception("supervising attempt %s failed", attempt_id)

    for job_id in Job.objects.filter(state__in=LIVE_JOB_STATES).values_list("pk", flat=True):
        enforce_limits(job_id)

    stuck = Job.objects.filter(
        state__in=[JobState.FINALIZING, JobState.TERMINATING], updated_at__lt=stall
    ).values_list("pk", flat=True)
    for job_id in stuck:
        finalize(job_id)
    return {"dispatched": len(to_dispatch), "supervised": len(live)}
