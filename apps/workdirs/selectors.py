"""Reads of code archives: the caller's own, by public id (another organization's archive is
not there for it)."""

from __future__ import annotations

from django.db.models import Sum

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest, NotFound
from apps.workdirs.models import Workdir

WORKDIR_PARAM = "container.workdir"


def workdir_for_org(organization: Organization, public_id: str) -> Workdir:
    """The organization's archive `public_id`; NotFound (404) otherwise."""
    workdir = Workdir.objects.for_org(organization).filter(public_id=public_id).first()
    if workdir is None:
        raise NotFound("No such workdir archive.")
    return workdir


def validate_workdir_ref(*, organization: Organization, workdir_id: str | None) -> None:
    """A job's `container.workdir` must name an archive of the job's organization: else a
    400 naming `container.workdir` (never telling whether another organization has it)."""
    if workdir_id is None:
        return
    if not Workdir.objects.for_org(organization).filter(public_id=workdir_id).exists():
        raise InvalidRequest(
            f"No workdir archive {workdir_id!r} in this organization; upload one with "
            "POST /api/v1/compute/workdirs.",
            param=WORKDIR_PARAM,
        )


def bytes_stored(organization: Organization) -> int:
    """Bytes of the organization's code archives as stored (its storage quota counts them)."""
    total = Workdir.objects.for_org(organization).aggregate(total=Sum("size_bytes"))["total"]
    return total or 0
