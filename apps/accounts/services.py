"""Writes that matter for organizations, memberships and API keys."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.accounts.keys import generate_key, hash_key
from apps.accounts.models import ApiKey, Membership, Organization, Role, User


@transaction.atomic
def organization_create(
    *,
    name: str,
    slug: str,
    owner: User | None = None,
    kind: str = Organization.Kind.TEAM,
    compute_enabled: bool = False,
) -> Organization:
    org = Organization.objects.create(
        name=name, slug=slug, kind=kind, compute_enabled=compute_enabled
    )
    if owner is not None:
        Membership.objects.create(user=owner, organization=org, role=Role.OWNER)
    return org


def api_key_create(
    *,
    organization: Organization,
    name: str,
    role: str = Role.MEMBER,
    created_by: User | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its full secret, which is never stored and cannot be
    shown again."""
    prefix, full_key = generate_key()
    key = ApiKey.objects.create(
        organization=organization,
        name=name,
        role=role,
        prefix=prefix,
        hashed_key=hash_key(full_key),
        created_by=created_by,
    )
    return key, full_key


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke a key; idempotent (a revoked key keeps its first revocation time)."""
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    key.refresh_from_db(fields=["revoked_at"])
    return key
