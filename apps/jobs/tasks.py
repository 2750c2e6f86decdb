"""Celery tasks for jobs. Thin: load by id, call the service. See apps.core.tasks."""

from __future__ import annotations

import contextlib
import logging
import time

import redis
from django.conf import settings

from apps.core.tasks import trainyard_task
from apps.jobs import enqueue, outcomes
from apps.jobs.execution import attempts, capacity, dispatch, stopping, supervision
from apps.jobs.execution import reconcile as reconcile_loop
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.jobs.telemetry import log_archive

logger = logging.getLogger(__name__)


@trainyard_task("jobs.dispatch_job")
def dispatch_job(job_id: int) -> None:
    dispatch.dispatch(job_id)


@trainyard_task("jobs.finalize_job")
def finalize_job(job_id: int) -> None:
    supervision.finalize(job_id)


@trainyard_task("jobs.dispatch_waiting", acks_late=False, max_retries=0)
def dispatch_waiting() -> None:
    """Capacity freed: dispatch the waiting jobs, organizations in turn (each dispatch
    places its job only if an offer has room, under the job's row lock). Safe to run twice;
    a lost one is made up by the reconcile pass."""
    capacity.dispatch_started()
    for job_id in reconcile_loop.waiting_in_turn(settings.RECONCILE_DISPATCH_BATCH):
        enqueue.dispatch_now(job_id)


@trainyard_task("jobs.stop_job")
def stop_job(job_id: int) -> None:
    stopping.stop_now(job_id)


@trainyard_task("jobs.release_attempt")
def release_attempt(attempt_id: int) -> None:
    attempts.release(attempt_id)


# Publishing a fine-tune's adapter and checkpoints to the hub copies files of tens to
# hundreds of megabytes.
@trainyard_task("jobs.job_succeeded", soft_time_limit=1800, time_limit=1900)
def job_succeeded(job_id: int) -> None:
    """The job kind's `succeeded` hook; safe to run twice (the hook's own promise)."""
    job = Job.objects.filter(pk=job_id, state=JobState.SUCCEEDED).first()
    if job is not None:
        hooks_for(job).succeeded(job)


@trainyard_task("jobs.job_outcome")
def job_outcome(job_id: int, state: str) -> None:
    """Call the outcome hooks of the apps above (`outcomes.OUTCOME_HOOKS`) for a job that
    reached `state` (ended or preempted); safe to run twice (the hooks' own promise)."""
    job = Job.objects.select_related("organization", "project").filter(pk=job_id).first()
    if job is not None:
        outcomes.notify(job, state)


# A long log takes longer than the default limits (tens of seconds for ten million lines).
@trainyard_task("jobs.archive_log", soft_time_limit=300, time_limit=360)
def archive_log(job_id: int) -> None:
    """Write an ended job's whole log out as one gzip file; safe to run twice."""
    log_archive.build(job_id)


RECONCILE_LOCK_S = 30.0


@trainyard_task("jobs.reconcile", acks_late=False, max_retries=0)
def reconcile() -> None:
    """One supervision pass. Beat may fire again before a slow pass ends; a Redis lock keeps
    passes from overlapping (an overlapping one is skipped, the next tick runs).

    The lock expires after RECONCILE_LOCK_S: a worker killed mid-pass must not stop
    supervision for long (a pass is bounded: one poll per provider, a billing batch). A pass
    that outlasts it may overlap the next one, which is safe: every step re-checks its row
    under lock."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    timeout = max(RECONCILE_LOCK_S, 6 * settings.RECONCILE_INTERVAL_S)
    lock = client.lock("trainyard:reconcile", timeout=timeout, blocking=False)
    if not lock.acquire():
        return
    started = time.monotonic()
    try:
        summary = reconcile_loop.reconcile()
        if any(summary.values()):
            # The pass's duration is what an operator watches as live attempts grow.
            logger.info("reconcile: %s in %.3fs", summary, time.monotonic() - started)
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()
