"""Beat's work on code archives. Thin: call the store."""

from __future__ import annotations

import logging

from django.conf import settings

from apps.core.tasks import trainyard_task
from apps.workdirs import store

logger = logging.getLogger(__name__)


@trainyard_task("workdirs.expire", acks_late=False, max_retries=0)
def expire() -> int:
    """Delete the archives no job has named for WORKDIR_RETENTION_DAYS (idempotent: a second
    run finds nothing more to delete). Returns how many were deleted."""
    deleted = store.workdirs_expire()
    if deleted:
        logger.info(
            "workdirs: %d archives unused for %d days deleted",
            deleted,
            settings.WORKDIR_RETENTION_DAYS,
        )
    return deleted
