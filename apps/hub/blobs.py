"""Storing and reading the hub's file contents (blobs), content-addressed per organization.

A blob is written once under `hub/<organization id>/<sha256[:2]>/<sha256>` in the default
storage and recorded as a `HubBlob` row. Bytes are hashed as they stream; a body whose hash
or size is not what was announced is deleted again and refused, so a row always names bytes
that hash to its `sha256`. Writing the same content twice stores it once: the second writer
finds the row (or loses the race for it and deletes its own copy).
"""

from __future__ import annotations

import hashlib
import io
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from apps.accounts import storage as quota
from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest, PayloadTooLarge
from apps.core.stored_files import open_stream
from apps.hub.models import HubBlob

CHUNK_BYTES = 1024 * 1024
SHA256_RE_LEN = 64


class BlobMismatch(InvalidRequest):
    error_type = "checksum_mismatch"
    default_detail = "The bytes do not hash to the announced sha256."


class FileTooLarge(PayloadTooLarge):
    default_detail = "The file is larger than HUB_MAX_FILE_BYTES."


def git_blob_oid(data: bytes) -> str:
    """git's id of a blob with these bytes (`git hash-object`)."""
    digest = hashlib.sha1(f"blob {len(data)}\0".encode(), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


def is_sha256(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) == SHA256_RE_LEN
        and all(c in "0123456789abcdef" for c in value)
    )


def storage_name(organization: Organization, sha256: str) -> str:
    return f"hub/{organization.pk}/{sha256[:2]}/{sha256}"


def find_blob(organization: Organization, sha256: str) -> HubBlob | None:
    return HubBlob.objects.filter(organization=organization, sha256=sha256).first()


def max_file_bytes() -> int:
    return settings.HUB_MAX_FILE_BYTES


def check_file_size(size: int, path: str = "") -> None:
    limit = max_file_bytes()
    if size > limit:
        what = f"{path} is" if path else "The file is"
        raise FileTooLarge(
            f"{what} {quota.human_bytes(size)}, over HUB_MAX_FILE_BYTES "
            f"({quota.human_bytes(limit)})."
        )


class _Hashing:
    """Reads `source` for the storage, hashing (sha256 and git's sha1) and counting; past
    `size` bytes it stops and marks the body too long."""

    closed = False

    def __init__(self, source: IO[bytes], size: int) -> None:
        self._source = source
        self._size = size
        self.sha256 = hashlib.sha256()
        self.git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
        self.read_bytes = 0
        self.too_long = False

    def seekable(self) -> bool:
        return False

    def read(self, n: int = -1) -> bytes:
        if self.too_long:
            return b""
        data = self._source.read(n if n and n > 0 else CHUNK_BYTES)
        if self.read_bytes + len(data) > self._size:
            self.too_long = True
            return b""
        self.sha256.update(data)
        self.git.update(data)
        self.read_bytes += len(data)
        return data


class _Stream(File):
    @property
    def size(self) -> int:  # type: ignore[override]
        return self.file.read_bytes

    def chunks(self, chunk_size: int | None = None):
        while data := self.file.read(chunk_size or CHUNK_BYTES):
            yield data


def store_blob(
    organization: Organization, source: IO[bytes], *, sha256: str, size: int, what: str = "file"
) -> HubBlob:
    """Store `size` bytes read from `source` that must hash to `sha256`; the blob row.

    A blob the organization holds already is returned without reading `source`. Raises
    BlobMismatch when the bytes differ from what was announced (nothing is kept),
    FileTooLarge past HUB_MAX_FILE_BYTES and QuotaExceeded past the organization's storage
    quota (both before reading, and the quota again before the row is written)."""
    if not is_sha256(sha256):
        raise InvalidRequest("A blob is named by its sha256: 64 lowercase hex digits.", "oid")
    existing = find_blob(organization, sha256)
    if existing is not None:
        touch(existing)
        return existing
    check_file_size(size)
    quota.check_room(organization, size, what=what)
    reader = _Hashing(source, size)
    name = default_storage.save(storage_name(organization, sha256), _Stream(reader, sha256))
    if reader.too_long or reader.read_bytes != size or reader.sha256.hexdigest() != sha256:
        default_storage.delete(name)
        raise BlobMismatch(
            f"The body is {reader.read_bytes if not reader.too_long else 'over'} "
            f"{size} bytes and hashes to {reader.sha256.hexdigest()}, not the announced "
            f"{size} bytes with sha256 {sha256}."
        )
    try:
        with transaction.atomic():
            quota.lock_for_storage(organization)
            quota.check_room(organization, size, what=what)
            return HubBlob.objects.create(
                organization=organization,
                sha256=sha256,
                git_oid=reader.git.hexdigest(),
                size_bytes=size,
                file=name,
            )
    except IntegrityError:
        default_storage.delete(name)
        winner = find_blob(organization, sha256)
        if winner is None:
            raise
        return winner
    except quota.QuotaExceeded:
        default_storage.delete(name)
        raise


def touch(blob: HubBlob) -> None:
    """Mark the blob as just used by an upload (see HubBlob.used_at)."""
    blob.used_at = timezone.now()
    HubBlob.objects.filter(pk=blob.pk).update(used_at=blob.used_at)


def store_bytes(organization: Organization, data: bytes, what: str = "file") -> HubBlob:
    """Store small content already in memory (a commit's inline file)."""
    sha256 = hashlib.sha256(data).hexdigest()
    return store_blob(organization, io.BytesIO(data), sha256=sha256, size=len(data), what=what)


def open_blob(blob: HubBlob, start: int = 0) -> IO[bytes]:
    """A stream of the blob's bytes from `start`. Raises StoredFileMissing."""
    return open_stream(blob.file.name, start=start)


def bytes_stored(organization: Organization) -> int:
    """Bytes of the organization's hub blobs (its storage quota counts them)."""
    total = HubBlob.objects.filter(organization=organization).aggregate(t=Sum("size_bytes"))["t"]
    return total or 0
