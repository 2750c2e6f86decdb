"""The hub's records: repositories of an organization, their commits, files and refs.

A repository (`HubRepo`) is a model or dataset repository named `<org slug>/<name>`. Its
history is a chain of commits (`HubCommit`, a 40-hex id like git's); each commit lists its
whole tree (`HubFile` rows: path → blob), so reading a revision is one indexed query and a
commit copies its parent's rows. Branches and tags (`HubRef`) point at commits.

File contents are blobs (`HubBlob`), content-addressed by sha256 *per organization*: two
organizations uploading the same bytes store them twice, so nothing one tenant answers
(a pre-upload's "already stored", a batch's missing upload action) reveals what another
stores. A blob is kept in Django's default storage (filesystem or S3, config/storage.py).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.jobs.models import Job


class RepoKind(models.TextChoices):
    MODEL = "model", "Model"
    DATASET = "dataset", "Dataset"


class RefKind(models.TextChoices):
    BRANCH = "branch", "Branch"
    TAG = "tag", "Tag"


class HubRepo(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="hub_repos"
    )
    kind = models.CharField(max_length=16, choices=RepoKind.choices)
    name = models.CharField(max_length=96)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The fine-tune whose adapter this model repository publishes (None: made by a person).
    source_job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="hub_repo"
    )

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "kind", "name"], name="hub_repo_unique_name"
            )
        ]

    def __str__(self) -> str:
        return self.repo_id

    @property
    def repo_id(self) -> str:
        return f"{self.organization.slug}/{self.name}"


class HubBlob(models.Model):
    """Bytes stored once per organization, named by their sha256. `git_oid` is git's blob
    id of the same bytes (what the hub shows as `blobId` and the ETag of a small file)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="hub_blobs"
    )
    sha256 = models.CharField(max_length=64)
    git_oid = models.CharField(max_length=40)
    size_bytes = models.PositiveBigIntegerField()
    file = models.FileField(max_length=500)
    created_at = models.DateTimeField(default=timezone.now)
    # When an upload last stored or named these bytes (a pre-upload or an upload that found
    # them stored already): garbage collection leaves a blob alone for a while after, so a
    # commit on its way to naming it never finds it gone (apps.hub.gc).
    used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "sha256"], name="hub_blob_unique_content"
            )
        ]
        indexes = [models.Index(fields=["used_at"], name="hub_blob_used_at")]

    def __str__(self) -> str:
        return self.sha256


class HubCommit(models.Model):
    repo = models.ForeignKey(HubRepo, on_delete=models.CASCADE, related_name="commits")
    oid = models.CharField(max_length=40)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    summary = models.CharField(max_length=500)
    description = models.TextField(blank=True, default="")
    author = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["repo", "oid"], name="hub_commit_unique_oid")
        ]

    def __str__(self) -> str:
        return self.oid


class HubFile(models.Model):
    """One path of one commit's tree."""

    commit = models.ForeignKey(HubCommit, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1000)
    blob = models.ForeignKey(HubBlob, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["commit", "path"], name="hub_file_unique_path")
        ]

    def __str__(self) -> str:
        return self.path


class HubRef(models.Model):
    repo = models.ForeignKey(HubRepo, on_delete=models.CASCADE, related_name="refs")
    kind = models.CharField(max_length=16, choices=RefKind.choices)
    name = models.CharField(max_length=200)
    commit = models.ForeignKey(HubCommit, on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["repo", "kind", "name"], name="hub_ref_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
