"""Storing an uploaded code archive: streamed to a temporary file (hashed and counted on the
way, cut off past WORKDIR_MAX_BYTES), checked member by member with the same rules the
runner applies when it unpacks it (`runner.archive`), and only then saved to Django's storage
and recorded. A refused archive leaves nothing behind. The archive counts against the
organization's storage quota (apps.accounts.storage): judged once its size is known, and
again under the organization's row lock in the transaction that records it.

Archives are deleted by their organization (`workdir_delete`: refused with 409
`workdir_in_use` while a job that has not ended names it, since its next attempt downloads
the archive) and by beat (`workdirs_expire`: those no job has named for
WORKDIR_RETENTION_DAYS). A job that has ended keeps its spec; its archive may go.

The body is never held whole in memory: it is read in chunks from the request (or from the
upload Django already spooled to disk) into a temporary file, which is what the checks read
and what the storage copies from.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from apps.accounts import storage
from apps.accounts.models import ApiKey, Organization, User
from apps.core.errors import Conflict, InvalidRequest, PayloadTooLarge
from apps.workdirs.models import Workdir, new_workdir_id
from runner.archive import FORMAT_TAR_GZ, ArchiveError, check_archive, detect_format

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
PARAM = "file"
# Jobs sit above this app: what it asks of them is found by dotted path.
LIVE_JOB_NAMING = "apps.jobs.selectors.live_job_naming_workdir"
WORKDIRS_IN_USE = "apps.jobs.selectors.workdirs_in_use"


class WorkdirInUse(Conflict):
    error_type = "workdir_in_use"
    default_detail = "A job that has not ended names this archive."


def max_bytes() -> int:
    return settings.WORKDIR_MAX_BYTES


def too_large(size: int | None = None) -> PayloadTooLarge:
    told = "The archive" if size is None else f"The archive ({size} bytes)"
    return PayloadTooLarge(
        f"{told} is larger than the {max_bytes()} bytes (WORKDIR_MAX_BYTES) accepted.",
        param=PARAM,
    )


def _spool(source: IO[bytes], out: IO[bytes]) -> tuple[int, str]:
    """Copy `source` into `out` in chunks; (size, sha256). PayloadTooLarge past the limit."""
    limit, size, digest = max_bytes(), 0, hashlib.sha256()
    while chunk := source.read(CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise too_large()
        digest.update(chunk)
        out.write(chunk)
    out.flush()
    return size, digest.hexdigest()


def storage_path(organization: Organization, public_id: str, archive_format: str) -> str:
    return f"workdirs/org-{organization.pk}/{public_id}.{archive_format}"


def workdir_create(
    *,
    organization: Organization,
    source: IO[bytes],
    created_by: User | None = None,
    created_by_key: ApiKey | None = None,
) -> Workdir:
    """Check and store the archive read from `source`. InvalidRequest (400, param `file`)
    when it is not a tar.gz or zip or a member breaks a rule; PayloadTooLarge (413) past
    WORKDIR_MAX_BYTES; QuotaExceeded (413 `quota_exceeded`) past the organization's storage
    quota."""
    with tempfile.NamedTemporaryFile(prefix="workdir-", suffix=".upload") as spooled:
        size, sha256 = _spool(source, spooled)
        if size == 0:
            raise InvalidRequest("The archive is empty.", param=PARAM)
        storage.check_room(organization, size, what="archive", param=PARAM)
        spooled.seek(0)
        archive_format = detect_format(spooled)
        if archive_format is None:
            raise InvalidRequest("The file is not a tar.gz or zip archive.", param=PARAM)
        try:
            members = check_archive(
                Path(spooled.name),
                archive_format,
                max_unpacked_bytes=settings.WORKDIR_MAX_UNPACKED_BYTES,
            )
        except ArchiveError as exc:
            what = "tar.gz" if archive_format == FORMAT_TAR_GZ else "zip"
            raise InvalidRequest(f"The {what} archive is refused: {exc}.", param=PARAM) from exc
        public_id = new_workdir_id()
        spooled.seek(0)
        name = default_storage.save(
            storage_path(organization, public_id, archive_format), File(spooled)
        )
    try:
        with transaction.atomic():
            storage.lock_for_storage(organization)
            storage.check_room(organization, size, what="archive", param=PARAM)
            return Workdir.objects.create(
                public_id=public_id,
                organization=organization,
                file=name,
                archive_format=archive_format,
                size_bytes=size,
                sha256=sha256,
                members=len(members),
                unpacked_bytes=sum(member.size for member in members),
                created_by=created_by,
                created_by_key=created_by_key,
            )
    except Exception:
        default_storage.delete(name)
        raise


def workdir_delete(workdir: Workdir) -> bool:
    """Delete the archive and, once that commits, its stored file. WorkdirInUse (409) names
    the job while one that has not ended names the archive. The row is locked while
    checking, so two deletes (or a delete and beat's expiry) do not both go ahead; a job
    submitted at that moment may still lose the race, and then fails `workdir_invalid` with
    its runner's line saying the download failed."""
    with transaction.atomic():
        locked = Workdir.objects.select_for_update().filter(pk=workdir.pk).first()
        if locked is None:  # deleted meanwhile: the caller's goal is met
            return False
        job = import_string(LIVE_JOB_NAMING)(locked.organization_id, locked.public_id)
        if job is not None:
            raise WorkdirInUse(
                f"Workdir {locked.public_id} is named by job {job.public_id} ({job.state}); "
                "delete it once that job has ended."
            )
        name = locked.file.name
        locked.delete()
        transaction.on_commit(lambda: _delete_file(name))
    return True


def _delete_file(name: str) -> None:
    try:
        default_storage.delete(name)
    except Exception:  # the row is gone either way; an orphaned file is only disk
        logger.exception("could not delete the stored file %s of a deleted workdir", name)


def workdirs_expire(now: datetime | None = None) -> int:
    """Delete every archive older than WORKDIR_RETENTION_DAYS that no job created within
    that many days names, nor any job that has not ended; return how many went. 0 days
    keeps every archive. Safe to run twice or side by side: each delete locks its row and
    looks at the jobs again."""
    days = settings.WORKDIR_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    in_use = import_string(WORKDIRS_IN_USE)(cutoff)
    deleted = 0
    for workdir in Workdir.objects.filter(created_at__lt=cutoff).order_by("id").iterator():
        if (workdir.organization_id, workdir.public_id) in in_use:
            continue
        try:
            deleted += workdir_delete(workdir)
        except WorkdirInUse:  # named by a job submitted since `in_use` was read
            continue
    return deleted
