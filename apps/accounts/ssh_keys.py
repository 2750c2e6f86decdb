"""What the SSH gateway asks of members' registered keys.

`member_key(organization_id, key)` is the whole rule: the key registered in that
organization whose owner is, right now, an active user and a member of it with a role that
may work on jobs (member, admin, owner). A viewer's key, a removed member's, a deactivated
user's and another organization's are all None, the same None as an unknown key, so the
gateway's answer tells a client nothing more. `touch(key)` records a successful session.

The job's own `access.ssh_public_key` is the gateway's to check (it is in the job's spec);
this module knows nothing of jobs.
"""

from __future__ import annotations

import base64

from django.utils import timezone

from apps.accounts.models import Role, SshKey
from apps.core.ssh_keys import InvalidPublicKey, parse_blob, parse_public_key

# Roles whose holders may open sessions into the organization's running jobs.
SESSION_ROLES = (Role.MEMBER, Role.ADMIN, Role.OWNER)


def member_key(organization_id: int, key: bytes | str) -> SshKey | None:
    """The registered key that lets its owner into `organization_id`'s jobs, or None.

    `key` is the blob an SSH client offers (bytes, as the wire and asyncssh's
    `SSHKey.public_data` carry it) or an OpenSSH public line (`ssh-ed25519 AAAA… [comment]`).
    The answer's `user` is loaded (who opened the session). Not an accepted key type: None.
    """
    try:
        parsed = parse_blob(key) if isinstance(key, bytes | bytearray) else parse_public_key(key)
    except InvalidPublicKey:
        return None
    found = (
        SshKey.objects.select_related("user", "organization")
        .filter(
            organization_id=organization_id,
            fingerprint=parsed.fingerprint,
            user__is_active=True,
            user__memberships__organization_id=organization_id,
            user__memberships__role__in=SESSION_ROLES,
        )
        .first()
    )
    # The fingerprint found the row; the key itself must be the same, byte for byte.
    if found is None or found.public_key.split(" ")[1] != base64.b64encode(parsed.blob).decode():
        return None
    return found


def touch(key: SshKey) -> None:
    """Record that `key` opened a session now (its `last_used_at` on the settings page)."""
    now = timezone.now()
    SshKey.objects.filter(pk=key.pk).update(last_used_at=now)
    key.last_used_at = now
