"""The reconcile loop (Celery beat, `jobs.reconcile`): one pass re-dispatches waiting and
stalled jobs, supervises every launched attempt, enforces limits and finishes jobs stuck in
`finalizing` or `terminating`. Cheap when nothing changes: a few indexed queries, then one
poll per live attempt."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.jobs import enqueue
from apps.jobs.execution.limits import LIVE_JOB_STATES, enforce_limits
from apps.jobs.execution.supervision import finalize, supervise
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState

logger = logging.getLogger(__name__)


def reconcile() -> dict[str, int]:
    """One pass of supervision. Returns what it did, for logs and tests."""
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
        enqueue.dispatch_now(job_id)

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
