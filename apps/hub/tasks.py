"""Beat's work on the hub. Thin: call the collector."""

from __future__ import annotations

import logging

from apps.core.tasks import trainyard_task
from apps.hub import gc

logger = logging.getLogger(__name__)


@trainyard_task("hub.collect_garbage", acks_late=False, max_retries=0)
def collect_garbage() -> int:
    """Delete hub blobs no commit names (apps.hub.gc); how many."""
    deleted = gc.collect_garbage()
    if deleted:
        logger.info("hub: %d blobs no commit names deleted", deleted)
    return deleted
