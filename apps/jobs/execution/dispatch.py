"""Dispatch: from `requested` to a launched runner.

`dispatch(job_id)` may run any number of times, concurrently, or be cut off anywhere: each
step re-reads the job under its row lock and does nothing if the job has moved on, and the
backend's `launch` is idempotent per attempt. A workload never runs inside a task; the task
only starts the runner and records its handle. What a crash leaves half-done, the next
dispatch (enqueued by reconcile) finishes.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.billing import budgets as billing_budgets
from apps.core import leases
from apps.core.money import format_usd, micros_to_usd
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.execution import preemption
from apps.jobs.execution.attempts import current_attempt, end_attempt, open_meter
from apps.jobs.execution.limits import BUDGET_EXHAUSTED
from apps.jobs.execution.placement import lock_offer_with_capacity
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, JobEvent
from apps.jobs.states import JobState
from apps.jobs.writes import JobWrite
from apps.providers.backends import allocates_at_launch, backend_for
from apps.providers.backends.base import (
    Bootstrap,
    LaunchRequest,
    PermanentBackendError,
    RetryableBackendError,
)

logger = logging.getLogger(__name__)

DISPATCHABLE = frozenset(
    {JobState.REQUESTED, JobState.PREEMPTED, JobState.ALLOCATING, JobState.PROVISIONING}
)
# Jobs waiting for a place: new ones, and preempted ones waiting to run again.
WAITING = frozenset({JobState.REQUESTED, JobState.PREEMPTED})


def dispatch(job_id: int) -> None:
    """Advance one job as far as dispatch goes: allocate, then launch. A dispatch that ends
    without crashing clears the count of deliveries (a launch, in its last write).

    One delivery at a time works on a job: it holds the job's dispatch lease
    (apps.core.leases) throughout, and a delivery that finds it held by a live worker (a
    slow launch: an image pull; reconcile sends the job again every pass once its launch
    has stalled) leaves at once, neither counted nor holding a worker process. A worker
    that dies mid-dispatch frees the lease with its database session, so the next delivery
    takes the launch up again."""
    with leases.lease(leases.DISPATCH, job_id) as ours:
        if not ours or not _count_delivery(job_id):
            return
        attempt = allocate(job_id, provision=True)
        # A job placed by an earlier delivery (its launch cut off) is launched from its state.
        launched = _start(attempt) if attempt is not None else launch(job_id)
        if not launched:
            Job.objects.filter(pk=job_id).update(dispatch_deliveries=0)


def _count_delivery(job_id: int) -> bool:
    """Count this delivery (committed at once, so a crash later still counts it): one
    UPDATE that also says whether the job is still to dispatch. A job whose dispatch keeps
    crashing fails `dispatch_crash`. False when there is nothing to do."""
    states = sorted(DISPATCHABLE)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET dispatch_deliveries = dispatch_deliveries + 1 "
            f"WHERE id = %s AND state IN ({', '.join(['%s'] * len(states))}) "
            "RETURNING dispatch_deliveries",
            [job_id, *states],
        )
        row = cursor.fetchone()
    if row is None:
        return False
    if row[0] > settings.DISPATCH_MAX_DELIVERIES:
        with transaction.atomic():
            job = Job.objects.select_for_update(no_key=True).filter(pk=job_id).first()
            if job is not None and job.state in DISPATCHABLE:
                _fail(job, "dispatch_crash", "Dispatch kept crashing; giving up on this job.")
        return False
    return True


def allocate(job_id: int, *, provision: bool = False) -> Attempt | None:
    """Place a waiting job on the cheapest offer with room: create its Attempt with the
    price captured now (billing starts here) and move it to `allocating` (a preempted job
    goes back through `requested`). A terminate budget over the job that cannot pay its first
    minute at the offer's price ends it `budget_exhausted` instead. Without capacity a
    standard job displaces a preemptible one (apps.jobs.execution.preemption) and waits for
    its place; a new job that still finds none after NO_CAPACITY_TIMEOUT_S fails
    `no_capacity`. A preempted job keeps waiting.

    `provision`: move on to `provisioning` in the same transaction, for a launch that
    follows at once (`dispatch`, with the attempt returned, its job loaded): what `launch`
    would do first in a transaction of its own. A crash before the runner starts leaves a
    provisioning job whose launch reconcile takes up again, as after a launch cut off."""
    with transaction.atomic():
        job = _locked(job_id)
        if job is None or job.state not in WAITING:
            return None
        placement = lock_offer_with_capacity(job)
        now = timezone.now()
        if placement is None:
            if job.state == JobState.REQUESTED and preemption.displace_for(job) is not None:
                return None
            _wait_for_capacity(job, now)
            return None
        offer = placement.offer
        refused = billing_budgets.refuse_allocation(
            organization_id=job.organization_id,
            project_id=job.project_id,
            price_micros_hr=offer.price_per_gpu_hour_micros * job.gpu_count,
        )
        if refused:
            # Allocation bills a minute at once: a budget that cannot pay it ends the job
            # here, before it holds anything.
            services.job_terminate(job=job, reason=BUDGET_EXHAUSTED, message=refused)
            return None
        write = JobWrite(job)
        if job.state == JobState.PREEMPTED:
            write.transition(JobState.REQUESTED, message="Placed again after preemption.")
        number = job.attempt_count + 1
        allocates_now = allocates_at_launch(offer.provider)
        attempt = Attempt.objects.create(
            job=job,
            number=number,
            provider=offer.provider,
            offer=offer,
            accelerator=offer.accelerator.name,
            gpu_count=job.gpu_count,
            gpu_devices=list(placement.gpu_devices),
            gpu_memory_gb=offer.accelerator.memory_gb,
            price_micros_hr=offer.price_per_gpu_hour_micros * job.gpu_count,
            allocated_at=now,
            billing_started_at=now if allocates_now else None,
        )
        write.set(attempt_count=number, allocated_at=now)
        if allocates_now:
            open_meter(job, attempt)  # the burn rate counts it from allocation
        price = format_usd(attempt.price_micros_hr)
        where = f"{offer.provider.name}: {attempt.accelerator} x{attempt.gpu_count}"
        if attempt.gpu_devices:
            where += f" (GPU {','.join(map(str, attempt.gpu_devices))})"
        write.event(
            attempt=number,
            type=JobEventType.PROVIDER_ALLOCATED,
            message=f"Allocated {where} at {price}/h.",
            data={
                "provider": offer.provider.name,
                "offer": offer.pk,
                "price_usd_hr": micros_to_usd(attempt.price_micros_hr),
                **({"gpu_devices": attempt.gpu_devices} if attempt.gpu_devices else {}),
            },
        )
        write.system_log(attempt=number, message=f"allocated {where} at {price}/h")
        write.transition(JobState.ALLOCATING, message=f"Allocated {where} at {price}/h.")
        if provision:
            write.transition(JobState.PROVISIONING)
        write.save()  # one write: one UPDATE of the job, its events, its line, the counters
    if settings.TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S:
        time.sleep(settings.TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S)
    return attempt


def _wait_for_capacity(job: Job, now) -> None:
    waited = now - job.queued_at
    timed_out = waited >= timedelta(seconds=settings.NO_CAPACITY_TIMEOUT_S)
    if timed_out and job.state == JobState.REQUESTED:
        _fail(job, "no_capacity", f"No capacity for {job.accelerator} x{job.gpu_count} in time.")
        return
    already_said = JobEvent.objects.filter(
        job=job, type=JobEventType.WAITING_FOR_CAPACITY, created_at__gte=job.queued_at
    ).exists()
    if not already_said:
        services.record_event(
            job=job,
            attempt=job.attempt_count or None,
            type=JobEventType.WAITING_FOR_CAPACITY,
            message=f"Waiting for {job.accelerator} x{job.gpu_count} capacity.",
            state_changed=True,  # its status now says why it waits
        )


def launch(job_id: int) -> bool:
    """Start the runner of the job's current attempt, once. Moves `allocating` to
    `provisioning` first, so a crash after the launch is seen as a provisioning job whose
    launch must be checked, never as an allocation that may be launched anew. True when
    this call recorded the launch (and cleared the job's count of dispatch deliveries)."""
    with transaction.atomic():
        job = _locked(job_id)
        if job is None or job.state not in {JobState.ALLOCATING, JobState.PROVISIONING}:
            return False
        attempt = current_attempt(job)
        if attempt is None or attempt.launched_at is not None:
            return False
        if job.state == JobState.ALLOCATING:
            services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    attempt.job = job
    return _start(attempt)


def _start(attempt: Attempt) -> bool:
    """Start the runner of `attempt` (its job `provisioning`, its launch not recorded) and
    record its handle; True when done, False when the backend refused it for good (the job
    failed)."""
    job, job_id = attempt.job, attempt.job_id
    request = LaunchRequest(
        job_id=job.public_id,
        attempt=attempt.number,
        accelerator=attempt.accelerator,
        gpu_count=attempt.gpu_count,
        ephemeral_disk_gb=job.ephemeral_disk_gb,
        image=job.spec["container"]["image"],
        max_runtime_hours=job.max_runtime_hours,
        gpu_devices=tuple(attempt.gpu_devices or ()),
        organization_key=f"org-{job.organization_id}",
    )
    bootstrap = Bootstrap(
        control_url=settings.TRAINYARD_PUBLIC_URL,
        job_id=job.public_id,
        attempt=attempt.number,
        token=token_for(attempt.token_nonce),
    )
    try:
        handle = backend_for(attempt.provider).launch(request, bootstrap)
    except RetryableBackendError as exc:
        # Retried (a bounded number of deliveries); meanwhile the job says why it waits.
        with transaction.atomic():
            locked = Job.objects.select_for_update(no_key=True).get(pk=job_id)
            if locked.state in DISPATCHABLE:
                services.system_log(
                    job=locked, attempt=attempt.number, message=f"launch failed, retrying: {exc}"
                )
        raise
    except PermanentBackendError as exc:
        reason = exc.reason
        with transaction.atomic():
            locked = Job.objects.select_for_update(no_key=True).get(pk=job_id)
            if locked.state in DISPATCHABLE:
                services.system_log(job=locked, attempt=attempt.number, message=str(exc))
                _fail(locked, reason, str(exc))
        return False
    with transaction.atomic():
        # The job's row first, as every writer of a job and its attempt takes them: the
        # runner's `started` (job, then attempt) raced this update (attempt, then job, for
        # the log line) into a deadlock, and the handle went unrecorded. Clearing the count
        # of deliveries is what locks it: this dispatch is done.
        Job.objects.filter(pk=job_id).update(dispatch_deliveries=0)
        updated = Attempt.objects.filter(pk=attempt.pk, launched_at__isnull=True).update(
            handle=handle, launched_at=timezone.now()
        )
        if updated:
            services.system_log(
                job=job,
                attempt=attempt.number,
                message=f"runner started on {attempt.provider.name}",
            )
    return True


def _locked(job_id: int) -> Job | None:
    """The job, its row locked (not its project's), with its project: the pushes of the
    events and log lines written under the lock name the project's group."""
    return (
        Job.objects.select_for_update(of=("self",), no_key=True)
        .select_related("project")
        .filter(pk=job_id)
        .first()
    )


def _fail(job: Job, reason: str, message: str) -> None:
    """Fail a job that is still being dispatched, ending its attempt if it has one. Call
    under the job's row lock."""
    attempt = current_attempt(job)
    if attempt is not None:
        end_attempt(attempt, reason=reason)
    services.job_transition(
        job_id=job.pk, to=JobState.FAILED, reason=reason, message=message, error_message=message
    )
