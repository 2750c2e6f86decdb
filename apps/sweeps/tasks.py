"""Celery tasks for sweeps. Thin: load by id, call the scheduler."""

from __future__ import annotations

from apps.core.tasks import trainyard_task
from apps.sweeps import scheduling
from apps.sweeps.models import Sweep


@trainyard_task("sweeps.reconcile", acks_late=False, max_retries=0)
def reconcile() -> None:
    """The safety net: advance every running sweep. It catches an outcome whose task was
    lost, and it is what stops a sweep at its cost cap while its trials are still running
    (their spend grows each billed minute, with no outcome to announce it)."""
    for sweep_id in Sweep.objects.filter(state=Sweep.State.RUNNING).values_list("pk", flat=True):
        scheduling.advance(sweep_id)
