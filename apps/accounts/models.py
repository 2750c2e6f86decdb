"""Tenancy: organizations, who belongs to them with which role, and their API keys.

An Organization is the tenant. Every other object hangs off one, and every query that
reaches it starts from the caller's organization.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone


class User(AbstractUser):
    """The person signing in. Kept as our own model so fields can be added without pain."""


class Organization(models.Model):
    class Kind(models.TextChoices):
        TEAM = "team", "Team"
        PERSONAL = "personal", "Personal"
        PUBLIC_RESEARCH = "public_research", "Public research"

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.TEAM)
    # Compute spends real money, so it is a fail-closed allow-list: off until an operator
    # turns it on.
    compute_enabled = models.BooleanField(default=False)
    # Bytes of workdirs, datasets and artifacts it may store (apps.accounts.storage); empty
    # for ORG_STORAGE_QUOTA_BYTES, 0 for no quota.
    storage_quota_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    """Roles in ascending order of power; `role_at_least` relies on this order."""

    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"
    OWNER = "owner", "Owner"


_ROLE_RANK = {role: rank for rank, role in enumerate(Role.values)}


def role_at_least(role: str, minimum: str) -> bool:
    """True when `role` carries at least the rights of `minimum`."""
    return _ROLE_RANK[role] >= _ROLE_RANK[minimum]


class MembershipQuerySet(models.QuerySet):
    def for_user(self, user: User) -> MembershipQuerySet:
        return self.filter(user=user).select_related("organization")


class Membership(models.Model):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="one_membership_per_org")
        ]
        ordering = ["organization__name"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} as {self.role}"

    def can(self, minimum: str) -> bool:
        return role_at_least(self.role, minimum)


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """An organization's API key. Only a SHA-256 digest of the full key is stored; the
    visible `prefix` finds the row, the digest proves the rest. See `apps.accounts.keys`."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=32, unique=True)
    hashed_key = models.CharField(max_length=64)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class SshKey(models.Model):
    """A public key a member registered for one organization: with it they open SSH sessions
    into that organization's running jobs through the gateway (viewers may register keys,
    but the gateway lets no viewer in; `apps.accounts.ssh_keys.member_key` decides).

    `public_key` is the line normalised to `<type> <base64>`; the comment that followed it
    is the default `name`. A key names one person in an organization (unique on the
    organization and the fingerprint, so the gateway can say who opened a session); the
    same person may register the same key in each of their organizations."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64)  # "SHA256:…" as OpenSSH prints it
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "fingerprint"], name="ssh_key_names_one_member"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"

    @property
    def key_type(self) -> str:
        return self.public_key.split(" ", 1)[0]
