"""Every write to secrets: create, replace, delete and key rotation.

Values are encrypted before they reach the database and never leave this app except through
`apps.secrets.selectors.resolve_secret_env`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import Organization
from apps.core.crypto import SecretUndecryptable, encrypt_data, rotate_token
from apps.core.errors import Conflict
from apps.providers.models import Provider
from apps.secrets.models import Secret
from apps.secrets.validation import validate_data, validate_name

ROTATE_BATCH_SIZE = 500


def secret_create(*, organization: Organization, name: str, data: dict[str, str]) -> Secret:
    """Create a secret of `organization` holding `data`.

    Raises InvalidRequest (param `name`, `data` or `data.KEY`) for a bad name or data, and
    Conflict (param `name`) when the organization already has a secret of that name. The
    name check is the database constraint, inside a savepoint, so two simultaneous creates
    cannot both win and the caller's transaction stays usable."""
    name = validate_name(name)
    data = validate_data(data)
    try:
        with transaction.atomic():
            return Secret.objects.create(
                organization=organization,
                name=name,
                keys=sorted(data),
                ciphertext=encrypt_data(data),
            )
    except IntegrityError as exc:
        # The only other unique column is the random public_id; re-raise if that was it.
        if not Secret.objects.for_org(organization).filter(name=name).exists():
            raise
        raise Conflict(f"A secret named {name!r} already exists.", param="name") from exc


def secret_replace(*, secret: Secret, data: dict[str, str]) -> Secret:
    """Replace all of the secret's values (and so its key list) with `data`.

    Raises InvalidRequest for bad data, leaving the row untouched. Keys not in `data` are
    gone afterwards."""
    data = validate_data(data)
    secret.keys = sorted(data)
    secret.ciphertext = encrypt_data(data)
    secret.updated_at = timezone.now()
    secret.save(update_fields=["keys", "ciphertext", "updated_at"])
    return secret


def secret_delete(*, secret: Secret) -> None:
    """Delete the secret. Jobs that name it in `secret_env` fail resolution from then on."""
    secret.delete()


@dataclass(frozen=True)
class Rotation:
    """What a rotation did: how many rows it re-encrypted, and the rows it left alone because
    no key of SECRETS_KEYS opens them (each still holds its old ciphertext)."""

    rotated: int
    undecryptable: list[Any] = field(default_factory=list)


def secrets_rotate(*, batch_size: int = ROTATE_BATCH_SIZE) -> Rotation:
    """Re-encrypt every secret with the newest key of SECRETS_KEYS.

    Works in batches by primary key, each in its own transaction with the rows locked, so a
    `secret_replace` racing with it either waits for the batch or is seen by it: rotation
    never writes back a value older than the one stored. `updated_at` is left alone (the
    values did not change). A row that opens with none of the keys is left as it is and
    listed in `undecryptable` (with its organization loaded), so one lost key neither stops
    the others' rotation nor hides which secrets it took with it."""
    rotated = 0
    undecryptable: list[Secret] = []
    last_id = 0
    while True:
        with transaction.atomic():
            batch = list(
                Secret.objects.select_for_update(of=("self",))
                .select_related("organization")
                .filter(id__gt=last_id)
                .order_by("id")
                .only("id", "ciphertext", "name", "public_id", "organization__slug")[:batch_size]
            )
            if not batch:
                return Rotation(rotated=rotated, undecryptable=undecryptable)
            opened = []
            for secret in batch:
                try:
                    secret.ciphertext = rotate_token(secret.ciphertext)
                except SecretUndecryptable:
                    undecryptable.append(secret)
                    continue
                opened.append(secret)
            Secret.objects.bulk_update(opened, ["ciphertext"])
        rotated += len(opened)
        last_id = batch[-1].id


def provider_credentials_rotate() -> Rotation:
    """Re-encrypt every provider's write-only credentials (an SSH private key) with the
    newest key of SECRETS_KEYS, rows locked, in one transaction (providers are few). A row
    that opens with none of the keys is left as it is and listed in `undecryptable`."""
    with transaction.atomic():
        providers = list(
            Provider.objects.select_for_update(no_key=True)
            .exclude(credentials_encrypted="")
            .only("id", "name", "credentials_encrypted")
        )
        opened, undecryptable = [], []
        for provider in providers:
            try:
                provider.credentials_encrypted = rotate_token(provider.credentials_encrypted)
            except SecretUndecryptable:
                undecryptable.append(provider)
                continue
            opened.append(provider)
        Provider.objects.bulk_update(opened, ["credentials_encrypted"])
    return Rotation(rotated=len(opened), undecryptable=undecryptable)
