"""Pushes to an endpoint's page: its revision flipped, a revision loaded or failed, the
endpoint stopped. Sent after commit; a failed push never fails the write (the page shows the
truth on reload). Nothing is sent while no page of the endpoint is open (`apps.core.live`)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.core.live import watched

logger = logging.getLogger(__name__)


def endpoint_group(endpoint_id: int) -> str:
    return f"serving.endpoint.{endpoint_id}"


def endpoint_changed(endpoint_id: int) -> None:
    layer = get_channel_layer()
    if layer is None or not watched(endpoint_group(endpoint_id)):
        return
    try:
        async_to_sync(layer.group_send)(endpoint_group(endpoint_id), {"type": "endpoint.changed"})
    except Exception:
        logger.warning("push for endpoint %s failed", endpoint_id, exc_info=True)
