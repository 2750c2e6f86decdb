"""The Playground's servers: one serve job per (organization, base model) that the project
pages chat through, and the adapters loaded on it.

- `PlaygroundServer`: the organization's engine for one base model. `job` is the serve job
  that runs it now (a Job of kind `serve`, `SERVE_FOR=playground`); a server whose job ended
  gets a new one on its next use (`services.server_for`). `last_used_at` is what the idle
  stop reads (`services.stop_idle`).
- `PlaygroundAdapter`: an artifact (a final adapter or a checkpoint) or an adapter at one
  commit of the organization's hub, which the server loads on demand under `pg-<artifact
  pk>` or `pg-h<commit pk>`, a name that only ever means that one adapter.
  `loaded_on_attempt` is the serve job's attempt whose engine has it: an engine restarted
  (a new attempt, or a new job) has nothing loaded, so the adapter is loaded again.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.hub.models import HubCommit
from apps.jobs.models import Artifact, Job


def served_name_for(artifact: Artifact | None = None, hub_commit: HubCommit | None = None) -> str:
    if hub_commit is not None:
        return f"pg-h{hub_commit.pk}"
    return f"pg-{artifact.pk}"


class PlaygroundServer(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    base_model = models.CharField(max_length=500)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    started_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["organization", "base_model"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "base_model"], name="playground_server_per_base"
            )
        ]

    def __str__(self) -> str:
        return f"{self.base_model} ({self.organization_id})"


class PlaygroundAdapter(models.Model):
    server = models.ForeignKey(PlaygroundServer, on_delete=models.CASCADE, related_name="adapters")
    # An artifact of a job, or an adapter at one commit of the organization's hub.
    artifact = models.ForeignKey(
        Artifact, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    hub_commit = models.ForeignKey(
        HubCommit, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    served_name = models.CharField(max_length=100)
    # The serve job's attempt whose engine has this adapter loaded (None: none has).
    loaded_on_attempt = models.PositiveIntegerField(null=True, blank=True)
    last_used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["server", "-last_used_at"]
        constraints = [
            models.UniqueConstraint(fields=["server", "artifact"], name="playground_adapter_once"),
            models.UniqueConstraint(
                fields=["server", "hub_commit"], name="playground_hub_adapter_once"
            ),
            models.CheckConstraint(
                condition=Q(artifact__isnull=False, hub_commit__isnull=True)
                | Q(artifact__isnull=True, hub_commit__isnull=False),
                name="playground_adapter_one_source",
            ),
        ]

    def __str__(self) -> str:
        return self.served_name
