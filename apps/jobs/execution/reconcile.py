"""The reconcile loop (Celery beat, `jobs.reconcile`): one pass re-dispatches stalled
launches, and waiting jobs when capacity freed (`execution.capacity`, organizations in
turn), supervises every launched attempt, enforces limits and budgets and finishes jobs stuck in
`finalizing` or `terminating`. Cheap when nothing changes: a few indexed queries (one for
all the live attempts, with their providers and jobs), then one `poll_many` per provider
(`supervision.supervise_many`): an SSH host or a Slurm login node is asked once per pass
about all its attempts, not once per attempt."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from apps.jobs import enqueue
from apps.jobs.execution import capacity
from apps.jobs.execution.limits import enforce_budgets, enforce_live_limits
from apps.jobs.execution.supervision import finalize, supervise_many
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from apps.providers.models import Provider

logger = logging.getLogger(__name__)

# What a pass never reads of the live attempts and their jobs (JSON parsed, text copied).
HEAVY_FIELDS = ("mask_values_encrypted", "job__spec", "job__metric_series", "job__error_message")


def waiting_in_turn(limit: int) -> list[int]:
    """Up to `limit` waiting jobs, organizations taking turns: each one's oldest first, then
    each one's second, and so on, so one organization's backlog never pushes another's
    jobs to the back of the queue."""
    turn = Window(
        RowNumber(),
        partition_by=[F("organization_id")],
        order_by=[F("queued_at").asc(), F("id").asc()],
    )
    return list(
        Job.objects.filter(state__in=[JobState.REQUESTED, JobState.PREEMPTED])
        .annotate(turn=turn)
        .order_by("turn", "queued_at", "id")
        .values_list("pk", flat=True)[:limit]
    )


def live_attempts() -> list[Attempt]:
    """Every launched attempt not yet ended, with its job and provider, in two queries.

    The pass reads a thousand of them every tick, so it reads no more than supervision
    uses: the job's specification, metric series and error message stay in the database
    (loaded on access, on the rare paths that read them), and each provider is read once
    and shared by its attempts rather than joined into every row."""
    attempts = list(
        Attempt.objects.filter(ended_at__isnull=True, launched_at__isnull=False)
        .select_related("job")
        .defer(*HEAVY_FIELDS)
    )
    providers = Provider.objects.in_bulk({attempt.provider_id for attempt in attempts})
    for attempt in attempts:
        attempt.provider = providers.get(attempt.provider_id)
    return attempts


def reconcile() -> dict[str, int]:
    """One pass of supervision. Returns what it did, for logs and tests."""
    now = timezone.now()
    stall = now - timedelta(seconds=settings.LAUNCH_STALL_S)
    # A launch that stalled (a worker died mid-dispatch) is always taken up again.
    to_dispatch = list(
        Job.objects.filter(
            state__in=[JobState.ALLOCATING, JobState.PROVISIONING],
            allocated_at__lt=stall,
            attempts__launched_at__isnull=True,
            attempts__ended_at__isnull=True,
        )
        .values_list("pk", flat=True)
        .distinct()[: settings.RECONCILE_DISPATCH_BATCH]
    )
    if capacity.worth_dispatching():
        to_dispatch += waiting_in_turn(settings.RECONCILE_DISPATCH_BATCH)
    for job_id in to_dispatch:
        enqueue.dispatch_now(job_id)

    # Every launched live attempt in one query, each provider's polled at once (one
    # poll_many); one broken attempt never stops supervision of the others.
    live = live_attempts()
    supervise_many(live)

    # Only the jobs where a minute accrued or a limit binds are locked and billed.
    enforce_live_limits()
    terminated = enforce_budgets()

    stuck = Job.objects.filter(
        state__in=[JobState.FINALIZING, JobState.TERMINATING], updated_at__lt=stall
    ).values_list("pk", flat=True)
    for job_id in stuck:
        finalize(job_id)
    return {"dispatched": len(to_dispatch), "supervised": len(live), "over_budget": terminated}
