"""Reads of secrets: the cursor-paginated list, and `secret_env` checking and resolution for
jobs.

`secret_env` maps an environment variable name in the workload to one key of one stored
secret of the job's organization:

    {"HF_TOKEN": {"secret_id": "sec_Vb3nRk8sQw1xYz2M", "key": "HF_TOKEN"}}

Job creation calls `validate_secret_env`; the runner's spec fetch calls `resolve_secret_env`,
which is the one place values are decrypted to be handed out. Log ingestion calls
`resolvable_secret_values` for the values it masks (never handed out, never stored plain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from apps.accounts.models import Organization
from apps.core.crypto import SecretUndecryptable, decrypt_data
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, created_page
from apps.secrets.models import Secret
from apps.secrets.validation import is_env_name

SECRET_ENV_PARAM = "container.secret_env"
MAX_PAGE_SIZE = 200


class SecretRef(TypedDict):
    secret_id: str
    key: str


class SecretEnvUndecryptable(SecretUndecryptable):
    """`resolve_secret_env` met a secret that no key of SECRETS_KEYS opens (its key was
    dropped before `rotate_secrets` re-encrypted it). Names the variable, the secret and the
    key it was asked for; never a value."""

    def __init__(self, *, env_name: str, secret_id: str, secret_name: str, key: str) -> None:
        self.env_name, self.secret_id, self.secret_name, self.key = (
            env_name,
            secret_id,
            secret_name,
            key,
        )
        super().__init__(
            f"No key in SECRETS_KEYS decrypts secret {secret_name!r} ({secret_id}), "
            f"which {env_name} takes key {key!r} from."
        )


@dataclass(frozen=True)
class SecretPage:
    items: list[Secret]
    next_cursor: str | None
    total: int


def secret_list(*, organization: Organization, page: PageRequest) -> SecretPage:
    """One page of the organization's secrets, oldest first (created_at, then id), by
    keyset: pages stay stable while secrets are created or deleted."""
    secrets_of_org = Secret.objects.for_org(organization)
    ascending = PageRequest(limit=page.limit, after=page.after, descending=False)
    items, next_cursor = created_page(secrets_of_org, ascending)
    return SecretPage(items=items, next_cursor=next_cursor, total=secrets_of_org.count())


def _checked_refs(secret_env: Any) -> dict[str, SecretRef]:
    """`secret_env` as {ENV_NAME: SecretRef}, or InvalidRequest naming the first bad entry."""
    if secret_env is None:
        return {}
    if not isinstance(secret_env, Mapping):
        raise InvalidRequest(
            "secret_env must be an object of ENV_NAME: {secret_id, key}.", param=SECRET_ENV_PARAM
        )
    refs: dict[str, SecretRef] = {}
    for env_name, ref in secret_env.items():
        param = f"{SECRET_ENV_PARAM}.{env_name}"
        if not is_env_name(env_name):
            raise InvalidRequest(
                "Environment variable names must match [A-Za-z_][A-Za-z0-9_]*.", param=param
            )
        if (
            not isinstance(ref, Mapping)
            or set(ref) != {"secret_id", "key"}
            or not isinstance(ref["secret_id"], str)
            or not isinstance(ref["key"], str)
        ):
            raise InvalidRequest(
                'Each entry must be {"secret_id": "sec_…", "key": "KEY"}.', param=param
            )
        refs[env_name] = SecretRef(secret_id=ref["secret_id"], key=ref["key"])
    return refs


def _referenced_secrets(
    organization: Organization, refs: dict[str, SecretRef], *fields: str
) -> dict[str, Secret]:
    """The organization's secrets that `refs` name, by public id, in one query. Another
    organization's secret is simply absent."""
    if not refs:
        return {}
    ids = {ref["secret_id"] for ref in refs.values()}
    found = Secret.objects.for_org(organization).filter(public_id__in=ids).only(*fields)
    return {secret.public_id: secret for secret in found}


def _check_ref(env_name: str, ref: SecretRef, secret: Secret | None, keys: Any) -> None:
    param = f"{SECRET_ENV_PARAM}.{env_name}"
    if secret is None:
        raise InvalidRequest(f"No secret {ref['secret_id']!r} in this organization.", param=param)
    if ref["key"] not in keys:
        raise InvalidRequest(f"Secret {ref['secret_id']!r} has no key {ref['key']!r}.", param=param)


def validate_secret_env(*, organization: Organization, secret_env: Any) -> None:
    """Check that every entry of `secret_env` names an existing key of an existing secret of
    `organization`, without decrypting anything. `None` counts as empty.

    Raises InvalidRequest with param `container.secret_env.ENV_NAME` (or
    `container.secret_env` when it is not an object) for the first bad entry."""
    refs = _checked_refs(secret_env)
    secrets_by_id = _referenced_secrets(organization, refs, "public_id", "keys")
    for env_name, ref in refs.items():
        secret = secrets_by_id.get(ref["secret_id"])
        _check_ref(env_name, ref, secret, secret.keys if secret else ())


def resolve_secret_env(*, organization: Organization, secret_env: Any) -> dict[str, str]:
    """{ENV_NAME: value} for `secret_env`, decrypted now: one query, each secret decrypted
    once. Raises the same InvalidRequest as `validate_secret_env` when a secret or key has
    gone since, and SecretEnvUndecryptable (naming the entry) when SECRETS_KEYS no longer
    opens a row.

    The result is plaintext: hand it only to the job's runner, never to logs, events, job
    specs or provider manifests."""
    refs = _checked_refs(secret_env)
    secrets_by_id = _referenced_secrets(organization, refs, "public_id", "name", "ciphertext")
    decrypted: dict[str, dict[str, str]] = {}
    resolved: dict[str, str] = {}
    for env_name, ref in refs.items():
        secret = secrets_by_id.get(ref["secret_id"])
        if secret is not None and secret.public_id not in decrypted:
            try:
                decrypted[secret.public_id] = decrypt_data(secret.ciphertext)
            except SecretUndecryptable as exc:
                raise SecretEnvUndecryptable(
                    env_name=env_name,
                    secret_id=secret.public_id,
                    secret_name=secret.name,
                    key=ref["key"],
                ) from exc
        data = decrypted[secret.public_id] if secret is not None else {}
        _check_ref(env_name, ref, secret, data)
        resolved[env_name] = data[ref["key"]]
    return resolved


def resolvable_secret_values(*, organization: Organization, secret_env: Any) -> list[str]:
    """The values of `secret_env` that can still be resolved, each entry on its own: a secret
    or key deleted since, or a row SECRETS_KEYS no longer opens, is skipped rather than
    failing the rest. For masking only (a value that is missing cannot leak anyway), so a
    malformed `secret_env` is an empty list, never an error. Plaintext: keep it in memory."""
    try:
        refs = _checked_refs(secret_env)
    except InvalidRequest:
        return []
    secrets_by_id = _referenced_secrets(organization, refs, "public_id", "ciphertext")
    decrypted: dict[str, dict[str, str]] = {}
    for public_id, secret in secrets_by_id.items():
        try:
            decrypted[public_id] = decrypt_data(secret.ciphertext)
        except SecretUndecryptable:
            continue
    values = []
    for ref in refs.values():
        value = decrypted.get(ref["secret_id"], {}).get(ref["key"])
        if isinstance(value, str) and value and value not in values:
            values.append(value)
    return values
