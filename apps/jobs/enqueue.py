"""Send the jobs tasks by their registered names, after the caller's transaction commits.

The domain (services, execution) must start the next step without importing `tasks`, which
sits above it and imports it: a task is named here, and Celery finds it by that name. Task
options that the decorator sets per task (the queue, say) do not travel with `send_task`;
routes belong in `CELERY_TASK_ROUTES`. `tests/jobs/test_enqueue.py` checks that every name
below is registered.
"""

from __future__ import annotations

from celery import current_app

from apps.core.transactions import after_commit

DISPATCH_JOB = "jobs.dispatch_job"
FINALIZE_JOB = "jobs.finalize_job"
DISPATCH_WAITING = "jobs.dispatch_waiting"
STOP_JOB = "jobs.stop_job"
ARCHIVE_LOG = "jobs.archive_log"
RELEASE_ATTEMPT = "jobs.release_attempt"
JOB_SUCCEEDED = "jobs.job_succeeded"
JOB_OUTCOME = "jobs.job_outcome"
TASK_NAMES = (
    DISPATCH_JOB,
    FINALIZE_JOB,
    DISPATCH_WAITING,
    STOP_JOB,
    ARCHIVE_LOG,
    RELEASE_ATTEMPT,
    JOB_SUCCEEDED,
    JOB_OUTCOME,
)


def _send(name: str, *args: int | str) -> None:
    current_app.send_task(name, args=list(args))


def dispatch_on_commit(job_id: int) -> None:
    """Place and launch the job once the caller's writes are visible to the worker."""
    after_commit(_send, DISPATCH_JOB, job_id)


def dispatch_now(job_id: int) -> None:
    """For callers outside a transaction (reconcile's sweep)."""
    _send(DISPATCH_JOB, job_id)


def finalize_on_commit(job_id: int) -> None:
    """Finish a job whose workload has ended, once the caller's writes are visible."""
    after_commit(_send, FINALIZE_JOB, job_id)


def dispatch_waiting_now() -> None:
    """Place the waiting jobs that fit now (capacity just freed), organizations in turn."""
    _send(DISPATCH_WAITING)


def stop_on_commit(job_id: int) -> None:
    """Signal a terminating job's workload at once, rather than on the next heartbeat or
    reconcile pass, once the caller's writes are visible."""
    after_commit(_send, STOP_JOB, job_id)


def release_on_commit(attempt_id: int) -> None:
    """Give back what an ended attempt holds at its provider, in a worker, once the caller's
    writes are visible: never in the request that ended it (a runner's own, often)."""
    after_commit(_send, RELEASE_ATTEMPT, attempt_id)


def archive_log_on_commit(job_id: int) -> None:
    """Write an ended job's log out as one gzip file (apps.jobs.telemetry.log_archive), once
    the caller's writes are visible."""
    after_commit(_send, ARCHIVE_LOG, job_id)


def archive_log_now(job_id: int) -> None:
    """For a reader that found an ended job's archive missing or stale (outside a write)."""
    _send(ARCHIVE_LOG, job_id)


def succeeded_on_commit(job_id: int) -> None:
    """Run the job kind's `succeeded` hook (a fine-tune publishes its adapter to the hub),
    once the caller's writes are visible."""
    after_commit(_send, JOB_SUCCEEDED, job_id)


def outcome_on_commit(job_id: int, state: str) -> None:
    """Have the apps above act on the job having reached `state` (`apps.jobs.outcomes`),
    once the caller's writes are visible."""
    after_commit(_send, JOB_OUTCOME, job_id, state)
