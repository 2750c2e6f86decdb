"""Fine-tunes' own data: the datasets uploaded to a project for training."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import User
from apps.core.ids import new_public_id
from apps.projects.models import Project
from trainer.formats import FORMAT_CHOICES


def new_dataset_id() -> str:
    return new_public_id("ds")


def dataset_upload_to(instance: Dataset, filename: str) -> str:
    return f"datasets/{instance.project.public_id}/{filename}"


class Dataset(models.Model):
    """A training file uploaded to a project, checked row by row before it was stored.

    The file lives in the default storage (the filesystem or an S3-compatible bucket, see
    config/storage.py), so it may have no local path. A fine-tune names it by `public_id`
    (`ds_…`, the form's Dataset field or the API's `dataset`); the runner downloads it
    into the workload's directory before the trainer starts (`apps.finetunes.inputs`)."""

    public_id = models.CharField(max_length=32, unique=True, default=new_dataset_id, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    file = models.FileField(upload_to=dataset_upload_to, max_length=500)
    dataset_format = models.CharField(max_length=32, choices=FORMAT_CHOICES)
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
        # The table keeps the name it had when the model lived in apps.projects
        # (migrations finetunes 0001 and projects 0004 moved it without touching it).
        db_table = "projects_dataset"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.project}/{self.name}"

    @property
    def suffix(self) -> str:
        """The stored file's suffix (`.jsonl` or `.csv`), which tells the trainer how to read
        it."""
        return "." + self.file.name.rsplit(".", 1)[-1].lower()
