"""The house Celery task decorator.

Every task: ids in, short (seconds), safe to run twice; acknowledged late and rejected when
its worker dies, so a crash means redelivery, never loss; bounded retries with exponential
backoff and jitter for transient errors (`apps.core.errors.Retryable` and its subclasses).
JSON only.
"""

from __future__ import annotations

from collections.abc import Callable

from celery import shared_task

from apps.core.errors import Retryable


def trainyard_task(name: str, **options) -> Callable:
    defaults = {
        "name": name,
        "acks_late": True,
        "reject_on_worker_lost": True,
        "autoretry_for": (Retryable,),
        "retry_backoff": True,
        "retry_backoff_max": 60,
        "retry_jitter": True,
        "max_retries": 5,
        "ignore_result": True,
    }
    return shared_task(**{**defaults, **options})
