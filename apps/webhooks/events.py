"""The event types a webhook may subscribe to: stable names, part of the API contract.

Never rename one; add new ones. `ping` is sent only by "Send test" and needs no subscription.
"""

from __future__ import annotations

from django.db import models


class EventType(models.TextChoices):
    JOB_SUCCEEDED = "job.succeeded", "A job succeeded"
    JOB_FAILED = "job.failed", "A job failed"
    JOB_TERMINATED = "job.terminated", "A job was terminated"
    JOB_PREEMPTED = "job.preempted", "A job was preempted (it is placed again)"
    BUDGET_THRESHOLD = "budget.threshold", "A budget crossed one of its thresholds"
    ENDPOINT_READY = "endpoint.ready", "An endpoint went live on a revision"
    ENDPOINT_FAILED = "endpoint.failed", "An endpoint or one of its revisions failed"


PING = "ping"
SUBSCRIBABLE = EventType.values
