"""Write-only secrets: named bundles of environment values, encrypted at rest.

Only `keys` (the sorted key names) is readable; the values live in `ciphertext`, a Fernet
token of the JSON-encoded `{KEY: value}` dict (see `apps.core.crypto`). Nothing here
decrypts: reads that need values go through `apps.secrets.selectors.resolve_secret_env`.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import Organization
from apps.core.ids import new_public_id

NAME_MAX_LENGTH = 100


def new_secret_id() -> str:
    return new_public_id("sec")


class SecretQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> SecretQuerySet:
        return self.filter(organization=organization)


class Secret(models.Model):
    """A secret of one organization. Its name is unique within the organization (a database
    constraint); `keys` always equals the sorted key names inside `ciphertext`."""

    public_id = models.CharField(max_length=32, unique=True, default=new_secret_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    keys = models.JSONField(default=list)
    ciphertext = models.TextField(editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = SecretQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="secret_name_per_org")
        ]
        # Serves the keyset pagination of the list endpoint: (org, created_at, id).
        indexes = [
            models.Index(fields=["organization", "created_at", "id"], name="secret_org_page"),
        ]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.name}"
