"""Supervision: what the backend says became of a job's workload (`poll`), and the end of the
job. The runner's own reports are `apps.jobs.execution.reports`; the loop that calls this is
`apps.jobs.execution.reconcile`; limits are `apps.jobs.execution.limits`.

Supervising an attempt is three steps: `stop_if_due` (signal a terminating or overdue
attempt, before its poll), the backend's poll, and `act_on_poll` (what its answer means for
the job). `supervise(attempt_id)` takes them for one attempt; `supervise_many` (the
reconcile pass) for every live attempt at once, with one `Backend.poll_many` per provider,
so a pass over a thousand attempts costs a round trip per provider, not per attempt. Every
step checks the job's state under its row lock, so a poll and a runner's report that cross
change nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.execution import preemption, reports
from apps.jobs.execution.attempts import (
    AttemptSuperseded,
    end_attempt,
    lock_current,
    start_billing,
)
from apps.jobs.execution.limits import grace_for
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Attempt, Job, LogLine
from apps.jobs.states import JobState
from apps.providers.backends import backend_for
from apps.providers.backends.base import (
    Backend,
    PermanentBackendError,
    PollResult,
    RetryableBackendError,
)

logger = logging.getLogger(__name__)

QUEUE_TIMEOUT = "queue_timeout"
# At most this many of a backend's diagnostic lines become system log lines at once.
DIAGNOSTIC_LINES = 40


def finalize(job_id: int) -> None:
    """Finish a job whose workload has ended: `finalizing` → succeeded/failed by exit code;
    `terminating` → terminated once the runner is gone or has reported its exit."""
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",), no_key=True).filter(pk=job_id).first()
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
                    reason=hooks_for(job).failure_reason(job, code),
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


def supervise(attempt_id: int) -> None:
    """One reconcile step for a launched, live attempt: poll it and act on what it says.
    Raises what the poll raised (after `_out_of_reach` for a provider out of reach)."""
    attempt = Attempt.objects.select_related("provider", "job").get(pk=attempt_id)
    if attempt.ended_at is not None or not attempt.handle:
        return
    backend = backend_for(attempt.provider)
    stop_if_due(attempt, backend)
    try:
        outcome: PollResult | Exception = backend.poll(attempt.handle)
    except Exception as exc:
        outcome = exc
    act_on_poll(attempt, backend, outcome)


def supervise_many(attempts: Iterable[Attempt]) -> int:
    """`supervise` for many launched, live attempts at once (the reconcile pass), loaded
    with their provider and job: each provider's attempts are polled together, in one
    `Backend.poll_many`, and each answer is acted on as `supervise` acts on its poll.

    Per provider: first the attempts due a stop are signalled (`stop_if_due`, before the
    poll, as in `supervise`), then one poll_many asks about all of them, then each answer is
    acted on. A poll_many that could not ask at all (a RetryableBackendError: the host or
    login node is out of reach) counts for each attempt as its own poll raising it. Every
    attempt's steps are isolated: an error is logged and the others go on. Returns how many
    attempts were polled."""
    by_provider: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        if attempt.ended_at is None and attempt.handle:
            by_provider.setdefault(attempt.provider_id, []).append(attempt)
    polled = 0
    for group in by_provider.values():
        polled += _supervise_group(group)
    return polled


def _supervise_group(group: list[Attempt]) -> int:
    """supervise_many's work for one provider's attempts; how many were polled."""
    try:
        backend = backend_for(group[0].provider)
    except Exception as exc:  # a provider whose backend cannot be had: each attempt says so
        for attempt in group:
            _supervision_failed(attempt, exc)
        return 0
    due: list[Attempt] = []
    for attempt in group:
        try:
            stop_if_due(attempt, backend)
        except Exception as exc:  # as in `supervise`: not polled this pass
            _supervision_failed(attempt, exc)
            continue
        due.append(attempt)
    if not due:
        return 0
    try:
        outcomes: list[PollResult | Exception] = list(
            backend.poll_many([attempt.handle for attempt in due])
        )
    except Exception as exc:  # nothing could be asked: each attempt's poll raised this
        outcomes = [exc] * len(due)
    if len(outcomes) != len(due):
        wrong = PermanentBackendError(
            f"{backend.kind}: poll_many answered {len(outcomes)} results for {len(due)} handles"
        )
        outcomes = [wrong] * len(due)
    for attempt, outcome in zip(due, outcomes, strict=True):
        try:
            act_on_poll(attempt, backend, outcome)
        except Exception as exc:  # one broken attempt must not stop supervision of the others
            _supervision_failed(attempt, exc)
    return len(due)


def _supervision_failed(attempt: Attempt, exc: BaseException) -> None:
    if isinstance(exc, RetryableBackendError):  # the provider is out of reach for now
        logger.warning("supervising attempt %s: %s; trying again next pass", attempt.pk, exc)
    else:
        logger.error("supervising attempt %s failed", attempt.pk, exc_info=exc)


def stop_if_due(attempt: Attempt, backend: Backend) -> None:
    """Before an attempt is polled: a terminating job's attempt is told to stop (once), and
    so is a displaced one that overstayed its time to checkpoint and exit."""
    job = attempt.job
    if job.state == JobState.TERMINATING and attempt.terminate_requested_at is None:
        backend.terminate(attempt.handle, grace_for(job.reason))
    elif preemption.stop_overdue(attempt):
        backend.terminate(attempt.handle, settings.TERMINATE_GRACE_S)
    else:
        return
    attempt.terminate_requested_at = timezone.now()
    Attempt.objects.filter(pk=attempt.pk).update(
        terminate_requested_at=attempt.terminate_requested_at
    )


def act_on_poll(attempt: Attempt, backend: Backend, outcome: PollResult | Exception) -> None:
    """Act on what the backend's poll of `attempt` (loaded with its provider and job) said:
    `outcome` is its PollResult, or the error it raised, which is raised again here (after
    `_out_of_reach` for a RetryableBackendError: a provider out of reach is never by itself
    a lost attempt)."""
    job = attempt.job
    if isinstance(outcome, Exception):
        if isinstance(outcome, RetryableBackendError):
            _out_of_reach(job, attempt)
        raise outcome
    result = outcome
    if result.state == "queued":
        if job.state != JobState.TERMINATING:
            _queued(attempt.pk, result.detail, backend)
        return
    if result.state == "running":
        if attempt.billing_started_at is None:
            _hardware_allocated(attempt.pk)
            return
        if job.state != JobState.TERMINATING and _silent(attempt):
            preemption.kill_silent(attempt)
        return
    if result.state == "exited" and result.exit_code is not None:
        if attempt.started_at is None:
            _record_diagnostics(job, attempt, backend)
        try:
            reports.runner_exited(attempt.pk, result.exit_code, confirmed=True)
        except AttemptSuperseded:
            return
        finalize(job.pk)
        return
    if job.state == JobState.TERMINATING:
        finalize_terminating_without_runner(job.pk)
        return
    # Gone without an exit record, or failed for the provider's own cause: make sure
    # nothing of it is left before a new attempt.
    _record_diagnostics(job, attempt, backend)
    backend.release(attempt.handle)
    if result.state == "failed":
        _failed(attempt.pk, result.reason or "launch_failed", result.detail or "The launch failed.")
        return
    _lost(attempt.pk, result.state, result.detail or "The workload was lost.")


def _out_of_reach(job: Job, attempt: Attempt) -> None:
    """The provider cannot be asked about the attempt (its host is down, say). That alone
    loses nothing: the runner heartbeats over HTTP. But once the runner too has been silent
    for HEARTBEAT_TIMEOUT_S, the attempt is given up without the provider: a running job is
    reclaimed and placed again, a terminating one ends. What is left on the far side cannot
    be reached either; its release is tried once and logged if it fails."""
    if attempt.billing_started_at is None or not _silent(attempt):
        return
    if job.state == JobState.TERMINATING:
        finalize_terminating_without_runner(job.pk)
        return
    _lost(
        attempt.pk,
        "unreachable",
        f"{attempt.provider.name} is out of reach and the runner has been silent for over "
        f"{settings.HEARTBEAT_TIMEOUT_S:g}s.",
    )


def _queued(attempt_id: int, detail: str, backend: Backend) -> None:
    """The attempt waits in the provider's queue: say why (once per reason) and, past the
    queue timeout, give the place up and put the job back in line for another."""
    with transaction.atomic():
        try:
            job, attempt = lock_current(attempt_id)
        except AttemptSuperseded:
            return
        if attempt.ended_at is not None or attempt.billing_started_at is not None:
            return
        if job.state != JobState.PROVISIONING:
            return
        reason = (detail or "waiting in the provider's queue")[:200]
        where = attempt.provider.name
        if attempt.queue_reason != reason:
            Attempt.objects.filter(pk=attempt.pk).update(queue_reason=reason)
            services.record_event(
                job=job,
                attempt=attempt.number,
                type=JobEventType.PROVIDER_QUEUED,
                message=f"Queued at {where}: {reason}.",
                data={"provider": where, "reason": reason},
                state_changed=True,  # the status shows the reason
            )
        timeout = float(attempt.provider.config.get("queue_timeout_s") or 0) or (
            settings.PROVIDER_QUEUE_TIMEOUT_S
        )
        waited = timezone.now() - (attempt.launched_at or attempt.allocated_at)
        if waited < timedelta(seconds=timeout):
            return
        _record_diagnostics(job, attempt, backend)
        services.record_event(
            job=job,
            attempt=attempt.number,
            type=JobEventType.QUEUE_TIMEOUT,
            message=f"Queued at {where} for over {timeout:g}s ({reason}): placing it again.",
            data={"provider": where, "reason": reason},
        )
        preemption.preempt(
            job,
            attempt,
            reason=QUEUE_TIMEOUT,
            message=f"Queued at {where} for too long; it will be placed again.",
        )


def _hardware_allocated(attempt_id: int) -> None:
    """The provider started a queued attempt: billing starts now."""
    with transaction.atomic():
        try:
            job, attempt = lock_current(attempt_id)
        except AttemptSuperseded:
            return
        if start_billing(job, attempt):
            services.system_log(
                job=job,
                attempt=attempt.number,
                message=f"{attempt.provider.name} allocated the hardware; billing starts",
            )
            services.record_event(
                job=job,
                attempt=attempt.number,
                type=JobEventType.PROVIDER_ALLOCATED,
                message=f"{attempt.provider.name} started the attempt.",
                data={"provider": attempt.provider.name, "queued": False},
                state_changed=True,
            )


def _record_diagnostics(job: Job, attempt: Attempt, backend: Backend) -> None:
    """The backend's explanation of a stalled or failed launch, as system log lines."""
    try:
        lines = backend.diagnostics(attempt.handle)
    except Exception:  # diagnostics explain a failure; they must never cause one
        logger.exception("diagnostics of attempt %s failed", attempt.pk)
        return
    for line in lines[-DIAGNOSTIC_LINES:]:
        services.system_log(job=job, attempt=attempt.number, message=f"[{backend.kind}] {line}")


def finalize_terminating_without_runner(job_id: int) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job_id)
        if job.state != JobState.TERMINATING:
            return
        attempt = job.attempts.select_related("provider").filter(number=job.attempt_count).first()
        _terminated(job, attempt)


def _heartbeat_lapsed(attempt: Attempt) -> bool:
    """No heartbeat for HEARTBEAT_TIMEOUT_S since the last one, or since the attempt got its
    hardware and was launched (a queued attempt has no runner yet to beat)."""
    marks = [attempt.billing_started_at, attempt.launched_at]
    last = attempt.last_heartbeat_at or max((m for m in marks if m is not None), default=None)
    return last is not None and timezone.now() - last > timedelta(
        seconds=settings.HEARTBEAT_TIMEOUT_S
    )


def _silent(attempt: Attempt) -> bool:
    """`_heartbeat_lapsed`, asked again of the database before it is believed: the attempt
    was loaded at the start of the pass, and a heartbeat may have come since. (Only an
    attempt that looks silent costs the extra read.)"""
    if not _heartbeat_lapsed(attempt):
        return False
    attempt.refresh_from_db(fields=["last_heartbeat_at"])
    return _heartbeat_lapsed(attempt)


def _lost(attempt_id: int, reason: str, message: str) -> None:
    """The workload is gone without an exit: a running job's hardware was reclaimed (it is
    preempted and placed again); a terminating one is terminated; one that was already
    finishing fails."""
    with transaction.atomic():
        locked = _live(attempt_id)
        if locked is None:
            return
        job, attempt = locked
        services.record_event(
            job=job,
            attempt=attempt.number,
            type=JobEventType.WORKLOAD_LOST,
            message=message,
            data={"reason": reason},
        )
        if job.state in preemption.DISPLACEABLE_STATES:
            preemption.preempt(job, attempt, reason=preemption.RECLAIMED, detail=reason)
            return
        _end_failed(job, attempt, reason, message)


def _failed(attempt_id: int, reason: str, message: str) -> None:
    """The provider says the attempt cannot run, or ended for a cause of its own that placing
    it again would not cure (an image that cannot be pulled, out of memory): the job fails
    with `reason` (a terminating one is terminated)."""
    with transaction.atomic():
        locked = _live(attempt_id)
        if locked is None:
            return
        job, attempt = locked
        services.system_log(job=job, attempt=attempt.number, message=message)
        _end_failed(job, attempt, reason, message)


def _live(attempt_id: int) -> tuple[Job, Attempt] | None:
    """The job and attempt, locked, when the attempt is still its job's live one (not ended,
    the job not final); None otherwise. Call inside a transaction."""
    try:
        job, attempt = lock_current(attempt_id)
    except AttemptSuperseded:
        return None
    if attempt.ended_at is not None or job.is_terminal:
        return None
    return job, attempt


def _end_failed(job: Job, attempt: Attempt, reason: str, message: str) -> None:
    """End `attempt` and its job (locked): failed with `reason`, or terminated when a user
    asked for that meanwhile."""
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
