from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.core.ids import new_public_id
from apps.jobs.finetune import DATASET_FORMATS


def new_project_id() -> str:
    return new_public_id("proj")


class ProjectQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> ProjectQuerySet:
        return self.filter(organization=organization)


class Project(models.Model):
    """A folder for jobs inside an organization. Its slug is unique within the org and
    names it in page URLs; its `public_id` names it in the API."""

    public_id = models.CharField(max_length=32, unique=True, default=new_project_id, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="projects"
    )
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="project_slug_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.slug}"


def new_dataset_id() -> str:
    return new_public_id("ds")


def dataset_upload_to(instance: Dataset, filename: str) -> str:
    return f"datasets/{instance.project.public_id}/{filename}"


class Dataset(models.Model):
    """A training file uploaded to a project, checked row by row before it was stored.

    The file lives in the default storage (the filesystem or an S3-compatible bucket, see
    config/storage.py), so it may have no local path. A fine-tune names it by `public_id`
    (`ds_…`, the form's Dataset field or the API's `dataset`); the runner downloads it
    into the workload's directory before the trainer starts (`apps.jobs.job_inputs`)."""

    public_id = models.CharField(max_length=32, unique=True, default=new_dataset_id, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    file = models.FileField(upload_to=dataset_upload_to, max_length=500)
    dataset_format = models.CharField(max_length=32, choices=DATASET_FORMATS)
    rows = models.PositiveIntegerField()
    size_bytes = models.PositiveBigIntegerField()
    # Hex SHA-256 of the stored file: the runner checks its download against it. Empty for
    # datasets uploaded before it was recorded.
    sha256 = models.CharField(max_length=64, blank=True, default="")
    uploaded_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.project}/{self.name}"

    @property
    def suffix(self) -> str:
        """The stored file's suffix (`.jsonl` or `.csv`), which tells the trainer how to read
        it."""
        return "." + self.file.name.rsplit(".", 1)[-1].lower()
