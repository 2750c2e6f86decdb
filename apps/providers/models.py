"""Compute providers: where jobs run. Operator-managed and shared by all organizations
(which organizations may use compute at all is `Organization.compute_enabled`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.core.crypto import decrypt_data, encrypt_data


class ProviderQuerySet(models.QuerySet):
    def enabled(self) -> ProviderQuerySet:
        return self.filter(enabled=True)


class Provider(models.Model):
    class Kind(models.TextChoices):
        LOCAL = "local", "Local host"
        SSH = "ssh", "SSH hosts"
        SLURM = "slurm", "Slurm cluster"
        KUBERNETES = "kubernetes", "Kubernetes cluster"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Backend settings (hosts, partition, namespace, ...). Never holds secret values.
    config = models.JSONField(default=dict, blank=True)
    # Write-only credentials (an SSH private key, say): one Fernet token (SECRETS_KEYS) of a
    # JSON object. Never shown, never in `config`; handed to the backend when it is built.
    credentials_encrypted = models.TextField(blank=True, default="", editable=False)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProviderQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def set_credentials(self, data: dict[str, str]) -> None:
        self.credentials_encrypted = encrypt_data(data) if data else ""

    def credentials(self) -> dict[str, str]:
        return decrypt_data(self.credentials_encrypted) if self.credentials_encrypted else {}
