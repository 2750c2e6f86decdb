"""Webhook tasks: thin, ids in, safe to run twice (the attempt claims its delivery first)."""

from __future__ import annotations

from apps.core.tasks import trainyard_task
from apps.webhooks import delivery


# An attempt waits at most WEBHOOK_TIMEOUT_S for the receiver; the limits leave room.
@trainyard_task("webhooks.deliver", soft_time_limit=45, time_limit=60)
def deliver(delivery_id: int) -> None:
    delivery.attempt(delivery_id)


@trainyard_task("webhooks.sweep")
def sweep() -> None:
    delivery.sweep()
