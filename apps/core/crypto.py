"""Encryption of secret values with a MultiFernet built from `settings.SECRETS_KEYS`.

The keys are Fernet keys, newest first: encryption always uses the first, decryption tries
each in turn, so a key rotates by prepending a new one, running `manage.py rotate_secrets`
and only then dropping the old one. The MultiFernet is cached and rebuilt whenever the
setting changes (tests swap keys with `override_settings`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class SecretUndecryptable(Exception):
    """A stored token that none of SECRETS_KEYS opens: a key was dropped before
    `rotate_secrets` re-encrypted every row, or the row was tampered with."""


# (the keys it was built from, the MultiFernet). Replaced whole, so readers in other threads
# see either the old pair or the new one, never a mix.
_cached: tuple[tuple[str, ...], MultiFernet] | None = None


def _configured_keys() -> tuple[str, ...]:
    raw: str | Sequence[str] = getattr(settings, "SECRETS_KEYS", ())
    if isinstance(raw, str):
        raw = raw.split(",")
    keys = tuple(key.strip() for key in raw if key and key.strip())
    if not keys:
        raise ImproperlyConfigured("SECRETS_KEYS must name at least one Fernet key.")
    return keys


def _build(keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for position, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError) as exc:
            # Never echo the key itself: it may be a real one with a typo.
            raise ImproperlyConfigured(
                f"SECRETS_KEYS entry {position} of {len(keys)} is not a valid Fernet key "
                "(32 url-safe base64-encoded bytes; make one with "
                "`python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`)."
            ) from exc
    return MultiFernet(fernets)


def multi_fernet() -> MultiFernet:
    """The MultiFernet for the current SECRETS_KEYS; raises ImproperlyConfigured on a bad
    key."""
    global _cached
    keys = _configured_keys()
    cached = _cached
    if cached is not None and cached[0] == keys:
        return cached[1]
    built = _build(keys)
    _cached = (keys, built)
    return built


def encrypt_data(data: dict[str, str]) -> str:
    """A Fernet token (ASCII) of `data` as JSON, encrypted with the newest key."""
    plaintext = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return multi_fernet().encrypt(plaintext).decode("ascii")


def decrypt_data(token: str) -> dict[str, str]:
    """The dict `encrypt_data` was given; raises SecretUndecryptable when no key opens it."""
    try:
        plaintext = multi_fernet().decrypt(token.encode("ascii"))
    except InvalidToken as exc:
        raise SecretUndecryptable("No key in SECRETS_KEYS decrypts this secret.") from exc
    return json.loads(plaintext)


def rotate_token(token: str) -> str:
    """The same plaintext re-encrypted with the newest key (keeps the original timestamp)."""
    try:
        return multi_fernet().rotate(token.encode("ascii")).decode("ascii")
    except InvalidToken as exc:
        raise SecretUndecryptable("No key in SECRETS_KEYS decrypts this secret.") from exc
