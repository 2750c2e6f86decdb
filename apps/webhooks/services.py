"""Every write to webhooks: create, change, rotate the secret, delete, and publishing an
event to the webhooks that subscribe to it.

A webhook's URL is vetted (`targets.vet`) whenever it is set; its secret is made here,
returned once to the caller, and stored encrypted. Publishing writes one `Delivery` per
subscribed webhook (unique per event: publishing the same event twice adds nothing) and
queues each on commit; `delivery.attempt` does the sending.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.core.crypto import SecretUndecryptable, decrypt_data, encrypt_data, rotate_token
from apps.core.errors import InvalidRequest
from apps.core.transactions import after_commit
from apps.webhooks import enqueue, envelopes, targets
from apps.webhooks.events import PING, SUBSCRIBABLE
from apps.webhooks.models import Delivery, Webhook
from apps.webhooks.signing import new_secret

MAX_WEBHOOKS_PER_ORG = 20


def _checked_events(events: list[str]) -> list[str]:
    unknown = [event for event in events if event not in SUBSCRIBABLE]
    if unknown:
        raise InvalidRequest(
            f"Unknown event type {unknown[0]!r}; one of: {', '.join(SUBSCRIBABLE)}.",
            param="events",
        )
    if not events:
        raise InvalidRequest("Subscribe to at least one event type.", param="events")
    return sorted(set(events), key=SUBSCRIBABLE.index)


def webhook_secret(webhook: Webhook) -> str:
    """The webhook's signing secret, decrypted (for signing only; never rendered again)."""
    return decrypt_data(webhook.secret_ciphertext)["secret"]


def webhook_create(
    *,
    organization: Organization,
    url: str,
    events: list[str],
    format: str = Webhook.Format.JSON,
    description: str = "",
    enabled: bool = True,
    created_by: User | None = None,
) -> tuple[Webhook, str]:
    """A new webhook and its signing secret (shown to the caller once, stored encrypted).
    Raises InvalidRequest for a URL that is refused (param `url`) or unknown events."""
    targets.vet(url)
    events = _checked_events(events)
    if Webhook.objects.for_org(organization).count() >= MAX_WEBHOOKS_PER_ORG:
        raise InvalidRequest(f"An organization has at most {MAX_WEBHOOKS_PER_ORG} webhooks.")
    secret = new_secret()
    webhook = Webhook.objects.create(
        organization=organization,
        url=url,
        events=events,
        format=format,
        description=description,
        enabled=enabled,
        secret_ciphertext=encrypt_data({"secret": secret}),
        created_by=created_by,
    )
    return webhook, secret


def webhook_update(*, webhook: Webhook, **changes: Any) -> Webhook:
    """Change any of url, events, format, description and enabled (a new URL is vetted)."""
    if "url" in changes:
        targets.vet(changes["url"])
    if "events" in changes:
        changes["events"] = _checked_events(changes["events"])
    for field, value in changes.items():
        setattr(webhook, field, value)
    webhook.updated_at = timezone.now()
    webhook.save(update_fields=[*changes, "updated_at"])
    return webhook


def webhook_rotate_secret(*, webhook: Webhook) -> tuple[Webhook, str]:
    """A new signing secret, in force for every attempt from now on (retries included)."""
    secret = new_secret()
    webhook.secret_ciphertext = encrypt_data({"secret": secret})
    webhook.updated_at = timezone.now()
    webhook.save(update_fields=["secret_ciphertext", "updated_at"])
    return webhook, secret


def webhook_secrets_reencrypt() -> tuple[int, list[Webhook]]:
    """Re-encrypt every webhook's secret with the newest key of SECRETS_KEYS: how many, and
    the webhooks whose secret no key opens (left as they are). Each row is locked while it
    is rewritten, so a rotation of its secret racing with this is never undone."""
    rotated, undecryptable = 0, []
    for pk in Webhook.objects.values_list("pk", flat=True):
        with transaction.atomic():
            webhook = (
                Webhook.objects.select_for_update(of=("self",))
                .select_related("organization")
                .filter(pk=pk)
                .first()
            )
            if webhook is None:
                continue
            try:
                token = rotate_token(webhook.secret_ciphertext)
            except SecretUndecryptable:
                undecryptable.append(webhook)
                continue
            Webhook.objects.filter(pk=pk).update(secret_ciphertext=token)
            rotated += 1
    return rotated, undecryptable


def webhook_delete(*, webhook: Webhook) -> None:
    """Delete the webhook and its delivery log; its pending deliveries are never sent."""
    webhook.delete()


def _give_up_at(created: datetime) -> datetime:
    return created + timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_S)


def event_publish(
    *,
    organization: Organization,
    event_type: str,
    key: str,
    data: dict[str, Any],
    created: datetime | None = None,
) -> int:
    """Write a delivery of the event named by `key` for every enabled webhook of the
    organization that subscribes to `event_type`, and queue them on commit. Idempotent:
    a webhook that already has this event gets no second delivery. How many it wrote."""
    created = created or timezone.now()
    # Matched here, not by JSON containment, which SQLite (`make run`'s database) lacks; an
    # organization has a handful of webhooks.
    enabled = Webhook.objects.for_org(organization).filter(enabled=True)
    hooks = [pk for pk, events in enabled.values_list("pk", "events") if event_type in events]
    if not hooks:
        return 0
    identifier = envelopes.event_id(key)
    payload = envelopes.envelope(
        organization=organization, type=event_type, id=identifier, created=created, data=data
    )
    with transaction.atomic():
        existing = set(
            Delivery.objects.filter(webhook_id__in=hooks, event_id=identifier).values_list(
                "webhook_id", flat=True
            )
        )
        rows = Delivery.objects.bulk_create(
            [
                Delivery(
                    webhook_id=hook,
                    event_id=identifier,
                    event_type=event_type,
                    payload=payload,
                    next_attempt_at=created,
                    give_up_at=_give_up_at(created),
                    created_at=created,
                )
                for hook in hooks
                if hook not in existing
            ],
            ignore_conflicts=True,  # a racing publish of the same event wrote it first
        )
        if rows:
            after_commit(_queue_event, identifier, hooks)
    return len(rows)


def _queue_event(identifier: str, hooks: list[int]) -> None:
    for delivery_id in Delivery.objects.filter(
        webhook_id__in=hooks, event_id=identifier, status=Delivery.Status.PENDING, attempts=0
    ).values_list("pk", flat=True):
        enqueue.deliver(delivery_id)


def webhook_ping(*, webhook: Webhook) -> Delivery:
    """A `ping` delivery to this webhook (enabled or not), queued at once: "Send test"."""
    now = timezone.now()
    identifier = envelopes.event_id(f"ping:{uuid.uuid4()}")
    payload = envelopes.envelope(
        organization=webhook.organization,
        type=PING,
        id=identifier,
        created=now,
        data={"webhook": {"id": webhook.public_id}},
    )
    delivery = Delivery.objects.create(
        webhook=webhook,
        event_id=identifier,
        event_type=PING,
        payload=payload,
        next_attempt_at=now,
        give_up_at=_give_up_at(now),
        created_at=now,
    )
    after_commit(enqueue.deliver, delivery.pk)
    return delivery
