"""Per-organization storage quota: the bytes an organization's code archives (workdirs),
datasets, artifacts (checkpoints, adapters) and hub repositories' files may take in all.

The quota is `Organization.storage_quota_bytes` when an operator set one (admin), else
ORG_STORAGE_QUOTA_BYTES; 0 means no quota. What is stored is counted from the rows that
name the files (their `size_bytes`), by hooks found by dotted path: the apps that own the
rows sit above this one (`workdirs`, `jobs`, `finetunes`, `hub`), and this module imports
none of them.

An upload is judged twice: before its body is read (`check_room` with the announced or
largest possible size, so a doomed upload is not streamed), and just before its row is
written (`check_room` again inside the transaction that writes it, after `lock_for_storage`):
the organization's row lock makes concurrent uploads of one organization take turns there,
so together they never pass the quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string

from apps.accounts.models import Organization
from apps.core.errors import PayloadTooLarge

# What counts against the quota: (label, dotted path of `f(organization) -> int bytes`).
USAGE_SOURCES: tuple[tuple[str, str], ...] = (
    ("workdirs", "apps.workdirs.selectors.bytes_stored"),
    ("datasets", "apps.finetunes.datasets.bytes_stored"),
    ("artifacts", "apps.jobs.selectors.artifact_bytes_stored"),
    ("hub", "apps.hub.blobs.bytes_stored"),
)


class QuotaExceeded(PayloadTooLarge):
    """413, like the size limits (a runner gives an artifact upload up at once on a 413)."""

    error_type = "quota_exceeded"
    default_detail = "The organization's storage quota is used up."


@dataclass(frozen=True)
class StorageUsage:
    used_bytes: int
    quota_bytes: int  # 0: no quota
    by_kind: dict[str, int]

    @property
    def room_bytes(self) -> int | None:
        """Bytes that may still be stored; None without a quota."""
        if not self.quota_bytes:
            return None
        return max(self.quota_bytes - self.used_bytes, 0)

    @property
    def percent_used(self) -> int | None:
        if not self.quota_bytes:
            return None
        return min(100, self.used_bytes * 100 // self.quota_bytes)


def quota_bytes(organization: Organization) -> int:
    """The organization's quota in bytes; 0 for none."""
    if organization.storage_quota_bytes is not None:
        return organization.storage_quota_bytes
    return settings.ORG_STORAGE_QUOTA_BYTES


def storage_usage(organization: Organization) -> StorageUsage:
    by_kind = {label: int(import_string(path)(organization) or 0) for label, path in USAGE_SOURCES}
    return StorageUsage(
        used_bytes=sum(by_kind.values()),
        quota_bytes=quota_bytes(organization),
        by_kind=by_kind,
    )


def lock_for_storage(organization: Organization) -> None:
    """Take the organization's row lock (FOR NO KEY UPDATE, as jobs and billing do) so the
    next `check_room` and the write after it are not interleaved with another upload's.
    Call inside a transaction."""
    Organization.objects.select_for_update(no_key=True).filter(pk=organization.pk).first()


def human_bytes(size: int) -> str:
    """`1.5 GiB (1,610,612,736 bytes)`: rounded to read, exact to compare."""
    if size < 1024:
        return f"{size} bytes"
    scaled, unit = float(size), "bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):  # noqa: B007 - the last unit is used below
        scaled /= 1024
        if scaled < 1024:
            break
    return f"{scaled:.1f} {unit} ({size:,} bytes)"


def check_room(
    organization: Organization, adding: int, *, what: str, param: str | None = None
) -> None:
    """Raise QuotaExceeded (413 `quota_exceeded`, naming the quota and what is stored) when
    storing `adding` more bytes would take the organization past its quota."""
    usage = storage_usage(organization)
    room = usage.room_bytes
    if room is None or adding <= room:
        return
    source = (
        "its storage_quota_bytes"
        if organization.storage_quota_bytes is not None
        else "ORG_STORAGE_QUOTA_BYTES"
    )
    raise QuotaExceeded(
        f"The {what} ({human_bytes(adding)}) does not fit in the organization's storage quota "
        f"of {human_bytes(usage.quota_bytes)} ({source}): {human_bytes(usage.used_bytes)} is "
        "stored in workdirs, datasets, artifacts and hub repositories. Delete some, or ask an "
        "operator for a larger quota.",
        param=param,
    )
