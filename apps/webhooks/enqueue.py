"""Send the webhooks tasks by their registered names (services sit below `tasks`).
`tests/jobs/test_enqueue.py` checks that every name below is a registered task."""

from __future__ import annotations

from celery import current_app

DELIVER = "webhooks.deliver"
TASK_NAMES = (DELIVER,)


def deliver(delivery_id: int, *, countdown: float = 0) -> None:
    """Attempt the delivery `countdown` seconds from now (the attempt checks it is due)."""
    current_app.send_task(DELIVER, args=[delivery_id], countdown=countdown or None)
