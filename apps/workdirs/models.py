"""Code archives a job can ship into its working directory (`container.workdir`).

An archive belongs to an organization, is checked member by member before it is stored
(`apps.workdirs.store`) and is kept in Django's default storage (the filesystem or an
S3-compatible bucket, see config/storage.py), so it may have no local path: the runner
downloads it through the runner API with its attempt's token, never from a host path.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.ids import new_public_id

FORMAT_CHOICES = [("tar.gz", "tar.gz"), ("zip", "zip")]


def new_workdir_id() -> str:
    return new_public_id("wd")


class WorkdirQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> WorkdirQuerySet:
        return self.filter(organization=organization)


class Workdir(models.Model):
    """One uploaded archive. Immutable once stored: a job names it by `public_id`, and the
    runner checks its download against `sha256` and `size_bytes`."""

    public_id = models.CharField(max_length=32, unique=True, default=new_workdir_id, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="workdirs"
    )
    file = models.FileField(max_length=500)
    archive_format = models.CharField(max_length=16, choices=FORMAT_CHOICES)
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    members = models.PositiveIntegerField(default=0)
    unpacked_bytes = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = WorkdirQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.public_id
