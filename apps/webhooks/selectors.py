"""Reads of webhooks and their delivery logs, always within one organization."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from apps.accounts.models import Organization
from apps.core.pagination import PageRequest, created_page
from apps.webhooks.models import Delivery, DeliveryAttempt, Webhook

LOG_ON_PAGE = 20


def webhooks_for_org(organization: Organization) -> QuerySet[Webhook]:
    return Webhook.objects.for_org(organization).select_related("organization")


def webhook_for_org(organization: Organization, public_id: str) -> Webhook | None:
    """The organization's webhook, or None (another organization's is not there)."""
    return webhooks_for_org(organization).filter(public_id=public_id).first()


def _with_attempts(deliveries: QuerySet[Delivery]) -> QuerySet[Delivery]:
    return deliveries.prefetch_related(
        Prefetch("attempt_rows", queryset=DeliveryAttempt.objects.order_by("number"))
    )


def delivery_page(*, webhook: Webhook, page: PageRequest) -> tuple[list[Delivery], str | None, int]:
    """One page of the webhook's deliveries, newest first, each with its attempts."""
    deliveries = Delivery.objects.filter(webhook=webhook)
    newest_first = PageRequest(limit=page.limit, after=page.after, descending=True)
    items, next_cursor = created_page(_with_attempts(deliveries), newest_first)
    return items, next_cursor, deliveries.count()


def recent_deliveries(webhook: Webhook, limit: int = LOG_ON_PAGE) -> list[Delivery]:
    """The delivery log the settings page shows: the newest deliveries, with attempts."""
    return list(_with_attempts(Delivery.objects.filter(webhook=webhook))[:limit])
