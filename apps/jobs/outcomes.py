"""Hooks of the apps above `jobs` that act when a job reaches an outcome (webhooks deliver,
sweeps advance), found by dotted path (`apps.core.hooks`): `jobs` imports nothing of them.

`notify` is called by the `jobs.job_outcome` task, in a Celery worker, after the write that
moved the job has committed: never inside the request or the transaction that moved it. It
runs for every ended state (succeeded, failed, terminated) and for preempted. Celery
delivers at least once, so a hook may see the same outcome twice and must be idempotent (key
its own writes on the job and the state). A hook that raises is logged and does not stop
the others; it owns its retries.

A hook is called as `hook(job=job, state=state)`: the Job as it stands when the task runs,
and the state it reached (which it may have left since: a preempted job is requeued at once).
"""

from __future__ import annotations

from apps.core.hooks import call_hooks
from apps.jobs.models import Job

OUTCOME_HOOKS: list[str] = [
    "apps.serving.hooks.job_outcome",
    "apps.sweeps.hooks.job_outcome",
    "apps.webhooks.hooks.job_outcome",
]


def notify(job: Job, state: str) -> None:
    """Call every outcome hook for `job` having reached `state`."""
    call_hooks(OUTCOME_HOOKS, f"job {job.public_id} {state}", job=job, state=state)
