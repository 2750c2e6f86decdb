"""Attempting a delivery: claim it, sign and send it, record the attempt, plan the next.

- Claim: one conditional UPDATE takes a pending delivery that is due and pushes its
  `next_attempt_at` out by a lease; a second run of the task (Celery redelivers, the sweep
  re-queues) finds it not due and returns. A worker that dies mid-attempt leaves the
  delivery due again once the lease ends, and the sweep picks it up.
- Send: the URL is vetted again (DNS may have changed since the webhook was saved) and the
  request goes to the vetted address (`transport`). Success is any 2xx.
- Otherwise the next attempt waits WEBHOOK_RETRY_BASE_S * 2**(n-1) (30 s, 1 m, 2 m, …),
  capped at WEBHOOK_RETRY_MAX_S; an attempt that would come after `give_up_at` (the event
  plus WEBHOOK_RETRY_WINDOW_S, a day) is not made and the delivery is `failed`. Short waits
  are queued with a countdown; longer ones are left to the sweep (a Redis broker redelivers
  a message held past its visibility timeout).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core.errors import ApiError
from apps.core.transactions import after_commit
from apps.webhooks import enqueue, envelopes, signing, targets, transport
from apps.webhooks.events import PING
from apps.webhooks.models import Delivery, DeliveryAttempt
from apps.webhooks.services import webhook_secret

logger = logging.getLogger(__name__)

USER_AGENT = "Trainyard-Webhooks/1"
# Waits up to this long are queued with a countdown; longer ones wait for the sweep.
COUNTDOWN_MAX_S = 300
SWEEP_BATCH = 500


def backoff_s(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (1-based)."""
    base = settings.WEBHOOK_RETRY_BASE_S
    return min(base * 2 ** (attempt - 1), settings.WEBHOOK_RETRY_MAX_S)


def _claim(delivery_id: int) -> Delivery | None:
    now = timezone.now()
    lease = timedelta(seconds=settings.WEBHOOK_TIMEOUT_S + 30)
    # A little early counts as due: the countdown was timed by another host's clock.
    due_by = now + timedelta(seconds=1)
    claimed = Delivery.objects.filter(
        pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=due_by
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + lease)
    if not claimed:
        return None
    return Delivery.objects.select_related("webhook__organization").filter(pk=delivery_id).first()


def _send(delivery: Delivery) -> tuple[int | None, str]:
    """(response code, error) of one try; the code is None when no response came back."""
    webhook = delivery.webhook
    try:
        target = targets.vet(webhook.url)
    except ApiError as exc:
        return None, f"{exc.error_type}: {exc.detail}"
    try:
        body = envelopes.body_bytes(delivery.payload, webhook.format)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Trainyard-Event": delivery.event_type,
            "Trainyard-Delivery": delivery.public_id,
            "Trainyard-Signature": signing.signature_header(
                webhook_secret(webhook), int(time.time()), body
            ),
        }
        response = transport.post(target, body, headers, timeout_s=settings.WEBHOOK_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    except Exception:  # recorded as a failed attempt (and retried), never lost with the task
        logger.exception("webhook delivery %s: sending failed", delivery.public_id)
        return None, "Internal error while sending; it is retried."
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}: {response.excerpt[:300]}"


def attempt(delivery_id: int) -> None:
    """Make the delivery's next attempt if it is pending and due; else nothing."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return
    started = timezone.now()
    if not delivery.webhook.enabled and delivery.event_type != PING:
        code, error = None, "The webhook is disabled."
        give_up = True
    else:
        code, error = _send(delivery)
        give_up = False
    finished = timezone.now()
    succeeded = not error
    wait = backoff_s(delivery.attempts)
    next_at = finished + timedelta(seconds=wait)
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=delivery.attempts,
            started_at=started,
            duration_ms=int((finished - started).total_seconds() * 1000),
            response_code=code,
            error=error,
        )
        fields: dict = {"response_code": code, "last_error": error}
        if succeeded:
            fields.update(
                status=Delivery.Status.SUCCEEDED, next_attempt_at=None, finished_at=finished
            )
        elif give_up or next_at > delivery.give_up_at:
            fields.update(status=Delivery.Status.FAILED, next_attempt_at=None, finished_at=finished)
        else:
            fields.update(next_attempt_at=next_at)
            if wait <= COUNTDOWN_MAX_S:
                after_commit(enqueue.deliver, delivery.pk, countdown=wait)
        Delivery.objects.filter(pk=delivery.pk).update(**fields)


def sweep() -> int:
    """Queue the pending deliveries that are due (their countdown was lost, their wait was
    long, or a worker died mid-attempt); how many."""
    due = list(
        Delivery.objects.filter(
            status=Delivery.Status.PENDING, next_attempt_at__lte=timezone.now()
        ).values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for delivery_id in due:
        enqueue.deliver(delivery_id)
    return len(due)
