"""Garbage collection of hub blobs: bytes that no commit of any repository names.

A blob outlives the files that named it when its repository is deleted (history and all),
or when an upload was never committed. Its bytes still count against the organization's
storage quota until they are deleted here. A blob is kept while any commit's tree names it
(`HubFile` protects it), and for HUB_BLOB_GRACE_S after an upload last stored or named it
(`HubBlob.used_at`): a commit on its way to naming it never finds it gone. Run by beat
(`hub.collect_garbage`, every HUB_GC_INTERVAL_S); safe to run twice or at once (rows are
taken with SKIP LOCKED and checked again under the lock).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.hub.models import HubBlob, HubFile

logger = logging.getLogger(__name__)

BATCH = 500


def collect_garbage(grace: timedelta | None = None) -> int:
    """Delete the blobs no commit names and no upload used within `grace` (default
    HUB_BLOB_GRACE_S): their rows, then their files. Returns how many were deleted."""
    grace = grace if grace is not None else timedelta(seconds=settings.HUB_BLOB_GRACE_S)
    deleted = 0
    while True:
        cutoff = timezone.now() - grace
        with transaction.atomic():
            doomed = list(
                HubBlob.objects.select_for_update(skip_locked=True)
                .filter(used_at__lt=cutoff)
                .filter(~Exists(HubFile.objects.filter(blob=OuterRef("pk"))))
                .order_by("pk")[:BATCH]
            )
            names = [blob.file.name for blob in doomed]
            HubBlob.objects.filter(pk__in=[blob.pk for blob in doomed]).delete()
        for name in names:
            try:
                default_storage.delete(name)
            except OSError as exc:  # the row is gone: an unreadable file is only disk
                logger.warning("hub gc: could not delete %s: %s", name, exc)
        deleted += len(doomed)
        if len(doomed) < BATCH:
            return deleted
