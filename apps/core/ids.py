"""Public identifiers: a short type prefix and 16 random base62 characters
(`job_9f2kQxWv3bT8mLpZ`). They are what URLs and the API show; database keys stay inside."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits
_LENGTH = 16


def new_public_id(prefix: str) -> str:
    return f"{prefix}_" + "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))
