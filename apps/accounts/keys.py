"""API key format and hashing.

A key reads `ty_<prefix>_<secret>`: `ty_<prefix>` is shown in the dashboard and finds the
row; the whole key is hashed with SHA-256. Keys carry 192 bits of randomness, so a plain
fast digest is enough (a password hasher would cost milliseconds per request for nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_TAG = "ty"
PREFIX_BYTES = 6
SECRET_BYTES = 24


@dataclass(frozen=True)
class ParsedKey:
    prefix: str
    full: str


def generate_key() -> tuple[str, str]:
    """A new key as (prefix, full key). Show the full key once; store only its hash."""
    prefix = f"{KEY_TAG}_{secrets.token_hex(PREFIX_BYTES)}"
    return prefix, f"{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"


def hash_key(full_key: str) -> str:
    return hashlib.sha256(full_key.encode()).hexdigest()


def parse_key(raw: str) -> ParsedKey | None:
    """Split a presented key into its lookup prefix, or None when it is not shaped like one."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_TAG or not parts[1] or not parts[2]:
        return None
    return ParsedKey(prefix=f"{parts[0]}_{parts[1]}", full=raw)


def key_matches(full_key: str, hashed: str) -> bool:
    return hmac.compare_digest(hash_key(full_key), hashed)
