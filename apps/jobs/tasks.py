"""Celery tasks for jobs. Thin: load by id, call the service. See apps.core.tasks."""

from __future__ import annotations

import contextlib
import logging

import redis
from django.conf import settings

from apps.core.tasks import trainyard_task
from apps.jobs.execution import dispatch, supervision
from apps.jobs.execution import reconcile as reconcile_loop

logger = logging.getLogger(__name__)


@trainyard_task("jobs.dispatch_job")
def dispatch_job(job_id: int) -> None:
    dispatch.dispatch(job_id)


@trainyard_task("jobs.finalize_job")
def finalize_job(job_id: int) -> None:
    supervision.finalize(job_id)


@trainyard_task("jobs.reconcile", acks_late=False, max_retries=0)
def reconcile() -> None:
    """One supervision pass. Beat may fire again before a slow pass ends; a Redis lock keeps
    passes from overlapping (an overlapping one is skipped, the next tick runs)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock("trainyard:reconcile", timeout=120, blocking=False)
    if not lock.acquire():
        return
    try:
        summary = reconcile_loop.reconcile()
        if any(summary.values()):
            logger.info("reconcile: %s", summary)
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()
