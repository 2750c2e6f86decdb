"""Pushes to an organization's Billing page: the balance moved, a budget notice was written.
Sent after commit; a failed push never fails the write (the page reloads its cards). Nothing
is sent while no Billing page of the organization is open (its sockets count themselves in
Redis, `apps.core.live`), so ledger writes nobody watches cost one Redis GET."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.core.live import watched

logger = logging.getLogger(__name__)


def billing_group(organization_id: int) -> str:
    return f"billing.org.{organization_id}"


def _send(organization_id: int, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None or not watched(billing_group(organization_id)):
        return
    try:
        async_to_sync(layer.group_send)(billing_group(organization_id), message)
    except Exception:
        logger.warning("billing push for organization %s failed", organization_id, exc_info=True)


def balance_changed(organization_id: int) -> None:
    _send(organization_id, {"type": "billing.changed"})


def notice(organization_id: int, notice_id: int) -> None:
    _send(organization_id, {"type": "billing.notice", "notice": notice_id})
