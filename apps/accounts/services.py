"""Writes that matter for organizations, memberships, API keys and members' SSH keys.

A key never outlives its creator's rights: every path that removes a membership or lowers
its role (the Django admin included) goes through `membership_remove` or
`membership_change_role`, which revoke or cap the API keys that person created for that
organization. Keys created by nobody (`create_api_key`) are not tied to a membership.
Removing a membership also deletes the SSH keys its user registered for that organization.

SSH keys are written only through `ssh_key_add` and `ssh_key_remove`, always for one
member in one organization: another organization's or another person's key is not found.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.keys import generate_key, hash_key
from apps.accounts.models import (
    ApiKey,
    Membership,
    Organization,
    Role,
    SshKey,
    User,
    role_at_least,
)
from apps.core.errors import InvalidRequest, NotFound
from apps.core.ssh_keys import InvalidPublicKey, parse_public_key

SSH_KEY_NAME_MAX = 100


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
    shown again. Refuses (400 `invalid_request` on `name`) a name an active key of the
    organization already has, case and surrounding spaces aside: the settings page and the
    CLI tell keys apart by name. The organization's row lock makes two racing creates of
    one name end with one key."""
    name = name.strip()
    with transaction.atomic():
        Organization.objects.select_for_update(no_key=True).filter(pk=organization.pk).first()
        if _active_key_named(organization, name):
            raise InvalidRequest(
                f"An active key is already named {name!r}: choose another name, or revoke it "
                "first.",
                param="name",
            )
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


def api_key_free_name(organization: Organization, base: str) -> str:
    """`base`, or `base-2`, `base-3`... whichever no active key of the organization has yet
    (for callers that name keys themselves, like `create_api_key` without `--name`)."""
    name, n = base, 1
    while _active_key_named(organization, name):
        n += 1
        name = f"{base}-{n}"
    return name


def _active_key_named(organization: Organization, name: str) -> bool:
    return ApiKey.objects.active().filter(organization=organization, name__iexact=name).exists()


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
    """Remove someone from an organization, revoke every API key they created for it and
    delete the SSH keys they registered for it. Returns how many API keys were revoked."""
    locked = Membership.objects.select_for_update().filter(pk=membership.pk).first()
    if locked is None:
        return 0
    revoked = _keys_created_in_org(locked).update(revoked_at=timezone.now())
    SshKey.objects.filter(organization_id=locked.organization_id, user_id=locked.user_id).delete()
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


def ssh_key_add(
    *, organization: Organization, user: User, public_key: str, name: str = ""
) -> SshKey:
    """Register `public_key` (one OpenSSH line) for `user` in `organization`, of which they
    must be a member (any role: a viewer may register keys, the gateway still refuses them).
    The key is stored as `<type> <base64>`; `name` defaults to the line's comment, else to
    its type. InvalidRequest (param `public_key` or `name`) for a key that is not an
    accepted one, or that this person or another member already registered here."""
    if not Membership.objects.filter(organization=organization, user=user).exists():
        raise NotFound("No such organization.")
    try:
        parsed = parse_public_key(public_key)
    except InvalidPublicKey as exc:
        raise InvalidRequest(str(exc), param="public_key") from exc
    given = " ".join((name or "").split())
    if len(given) > SSH_KEY_NAME_MAX:
        raise InvalidRequest(f"A name has at most {SSH_KEY_NAME_MAX} characters.", param="name")
    name = given or " ".join(parsed.comment.split())[:SSH_KEY_NAME_MAX] or parsed.key_type
    existing = SshKey.objects.filter(
        organization=organization, fingerprint=parsed.fingerprint
    ).first()
    if existing is not None:
        raise InvalidRequest(_taken_message(existing, user), param="public_key")
    try:
        with transaction.atomic():
            return SshKey.objects.create(
                organization=organization,
                user=user,
                name=name,
                public_key=parsed.line,
                fingerprint=parsed.fingerprint,
            )
    except IntegrityError as exc:  # the same key added twice at once
        raise InvalidRequest(
            "This key was registered in this organization a moment ago.", param="public_key"
        ) from exc


def _taken_message(existing: SshKey, user: User) -> str:
    if existing.user_id == user.pk:
        return f"You have already registered this key here, as {existing.name!r}."
    # A key names one person in an organization: the gateway must know who came in.
    return (
        "Another member of this organization has registered this key; a key identifies one "
        "person here. Make a key of your own (`ssh-keygen -t ed25519`)."
    )


def ssh_key_remove(*, organization: Organization, user: User, key_id: int) -> None:
    """Delete one of `user`'s keys in `organization`; NotFound for any other key (another
    person's or another organization's alike)."""
    deleted, _ = SshKey.objects.filter(pk=key_id, organization=organization, user=user).delete()
    if not deleted:
        raise NotFound("No such SSH key.")
