"""Storing an uploaded code archive: streamed to a temporary file (hashed and counted on the
way, cut off past WORKDIR_MAX_BYTES), checked member by member with the same rules the
runner applies when it unpacks it (`runner.archive`), and only then saved to Django's storage
and recorded. A refused archive leaves nothing behind.

The body is never held whole in memory: it is read in chunks from the request (or from the
upload Django already spooled to disk) into a temporary file, which is what the checks read
and what the storage copies from.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction

from apps.accounts.models import ApiKey, Organization, User
from apps.core.errors import InvalidRequest, PayloadTooLarge
from apps.workdirs.models import Workdir, new_workdir_id
from runner.archive import FORMAT_TAR_GZ, ArchiveError, check_archive, detect_format

CHUNK_BYTES = 1024 * 1024
PARAM = "file"


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
    WORKDIR_MAX_BYTES."""
    with tempfile.NamedTemporaryFile(prefix="workdir-", suffix=".upload") as spooled:
        size, sha256 = _spool(source, spooled)
        if size == 0:
            raise InvalidRequest("The archive is empty.", param=PARAM)
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
