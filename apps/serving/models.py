"""Endpoints: a stable name in an organization pointing at an immutable revision.

- `Endpoint` (`ep_…`): a name unique in its organization, the base model, the compute it runs
  on, the serve job that runs its engine (a Job of kind `serve`), and two pointers:
  `current_revision` (what answers) and `previous_revision` (what a rollback flips back to;
  kept loaded on the engine so the flip is instant). A swap or a rollback changes both
  pointers in one row update.
- `EndpointRevision`: number n of an endpoint, the artifact it serves (a final adapter or a
  checkpoint) and its served name on the engine, `<endpoint>-r<n>`, which is never reused:
  output under a name always comes from the one artifact it was loaded from.
- `Promotion`: who made which revision current, when, and how (swap or rollback).
- `EndpointRequest`: one row per proxied request, for usage by key and day.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.ids import new_public_id
from apps.hub.models import HubCommit
from apps.jobs.models import Artifact, Job
from apps.projects.models import Project


def new_endpoint_id() -> str:
    return new_public_id("ep")


class Endpoint(models.Model):
    class State(models.TextChoices):
        STARTING = "starting"  # the engine or the first revision is not ready yet
        READY = "ready"
        FAILED = "failed"  # the serve job ended without being stopped
        STOPPED = "stopped"

    public_id = models.CharField(
        max_length=32, unique=True, default=new_endpoint_id, editable=False
    )
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=63)
    base_model = models.CharField(max_length=500)
    compute = models.JSONField(default=dict)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    current_revision = models.ForeignKey(
        "EndpointRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    previous_revision = models.ForeignKey(
        "EndpointRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revision_count = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    error_message = models.TextField(blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="endpoint_name_per_org")
        ]

    def __str__(self) -> str:
        return self.name


class EndpointRevision(models.Model):
    class State(models.TextChoices):
        LOADING = "loading"
        READY = "ready"
        FAILED = "failed"
        RETIRED = "retired"

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    # What it serves: an artifact of one of the organization's jobs, or an adapter in a
    # model repository of the organization's hub at one commit (`hub_revision` says how the
    # target named it: `<org>/<name>@<revision>`). Exactly one of the two.
    artifact = models.ForeignKey(
        Artifact, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    hub_commit = models.ForeignKey(
        HubCommit, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    hub_revision = models.CharField(max_length=400, blank=True, default="")
    served_name = models.CharField(max_length=100)
    state = models.CharField(max_length=16, choices=State.choices, default=State.LOADING)
    error_message = models.TextField(blank=True)
    # The serve job's attempt whose engine has this revision loaded (None: none has).
    loaded_on_attempt = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["endpoint", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "number"], name="revision_number_once"),
            models.UniqueConstraint(fields=["endpoint", "served_name"], name="served_name_once"),
            models.CheckConstraint(
                condition=Q(artifact__isnull=False, hub_commit__isnull=True)
                | Q(artifact__isnull=True, hub_commit__isnull=False),
                name="revision_serves_one_thing",
            ),
        ]

    def __str__(self) -> str:
        return self.served_name

    @property
    def label(self) -> str:
        return f"r{self.number}"

    @property
    def hub_repo_name(self) -> str:
        """The repository's name (without its organization and revision), for a hub one."""
        return self.hub_revision.split("@", 1)[0].partition("/")[2]


class Promotion(models.Model):
    class Kind(models.TextChoices):
        FIRST = "first"  # the endpoint's first revision went live
        SWAP = "swap"
        ROLLBACK = "rollback"

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="promotions")
    revision = models.ForeignKey(EndpointRevision, on_delete=models.CASCADE, related_name="+")
    replaced = models.ForeignKey(
        EndpointRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    by_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} to {self.revision_id}"


class EndpointRequest(models.Model):
    """One request through the proxy: what usage sums by key and day."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+")
    revision = models.ForeignKey(
        EndpointRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.CharField(max_length=32)
    status_code = models.PositiveSmallIntegerField()
    stream = models.BooleanField(default=False)
    cancelled = models.BooleanField(default=False)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["endpoint", "started_at"], name="endpoint_request_at"),
            models.Index(fields=["organization", "started_at"], name="org_request_at"),
        ]

    def __str__(self) -> str:
        return f"{self.path} {self.status_code}"

    @property
    def is_error(self) -> bool:
        return self.status_code >= 400
