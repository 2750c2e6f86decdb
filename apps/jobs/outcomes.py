"""Hooks of the apps above `jobs` that act when a job reaches an outcome (sweeps advance,
webhooks deliver), found by dotted path as the job kinds are (`kinds.KIND_HOOKS`): `jobs`
imports nothing of them, and no Django signal runs between our apps.

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

import logging

from django.utils.module_loading import import_string

from apps.jobs.models import Job

logger = logging.getLogger(__name__)

OUTCOME_HOOKS: list[str] = []


def notify(job: Job, state: str) -> None:
    """Call every outcome hook for `job` having reached `state`."""
    for path in OUTCOME_HOOKS:
        try:
            import_string(path)(job=job, state=state)
        except Exception:
            logger.exception("job %s: outcome hook %s failed for %s", job.public_id, path, state)
