"""Writes that matter for organizations, memberships and API keys.

A key never outlives its creator's rights: every path that removes a membership or lowers
its role (the Django admin included) goes through `membership_remove` or
`membership_change_role`, which revoke or cap the API keys that person created for that
organization. Keys created by nobody (`create_api_key`) are not tied to a membership.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.accounts.keys import generate_key, hash_key
from apps.accounts.models import ApiKey, Membership, Organization, Role, User, role_at_least
from apps.core.errors import InvalidRequest


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


def _keys_created_in_org(membership: Membership):
    return ApiKey.objects.active().filter(
        organization_id=membership.organization_id, created_by_id=membership.user_id
    )


@transaction.atomic
def membership_remove(*, membership: Membership) -> int:
    """Remove someone from an organization and revoke every API key they created for it.
    Returns how many keys were revoked."""
    locked = Membership.objects.select_for_update().filter(pk=membership.pk).first()
    if locked is None:
        return 0
    revoked = _keys_created_in_org(locked).update(revoked_at=timezone.now())
    locked.delete()
    return revoked


@transaction.atomic
def membership_change_role(*, membership: Membership, role: str) -> int:
    """Give a membership a new role. On a demotion the API keys its user created for the
    organization are capped to the new role (a key never carries more than its creator);
    a promotion gives no key back what it lost. Returns how many keys were capped."""
    if role not in Role.values:
        raise InvalidRequest(f"Unknown role {role!r}.", param="role")
    locked = Membership.objects.select_for_update().get(pk=membership.pk)
    Membership.objects.filter(pk=locked.pk).update(role=role)
    membership.role = role
    above = [other for other in Role.values if not role_at_least(role, other)]
    return _keys_created_in_org(locked).filter(role__in=above).update(role=role)


@transaction.atomic
def user_delete(*, user: User) -> None:
    """Delete a user, first removing each of their memberships (and so their keys)."""
    for membership in Membership.objects.filter(user=user):
        membership_remove(membership=membership)
    user.delete()
