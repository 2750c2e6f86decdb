"""Runner tokens: one per attempt, `tyr_<nonce>_<mac>`, where mac = HMAC-SHA256(SECRET_KEY,
nonce). Only the nonce is stored, so a database dump yields no usable token, and the same
token can be handed to a relaunched runner. Changing SECRET_KEY invalidates live tokens."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

PREFIX = "tyr"


def _mac(nonce: str, purpose: str = "runner") -> str:
    key = f"trainyard-{purpose}-token:{settings.SECRET_KEY}".encode()
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def _nonce_of(token: str, prefix: str, purpose: str) -> str | None:
    parts = token.split("_")
    if len(parts) != 3 or parts[0] != prefix:
        return None
    nonce, mac = parts[1], parts[2]
    if not hmac.compare_digest(mac, _mac(nonce, purpose)):
        return None
    return nonce


def token_for(nonce: str) -> str:
    return f"{PREFIX}_{nonce}_{_mac(nonce)}"


def nonce_from(token: str) -> str | None:
    """The nonce of a well-formed, authentic token, or None."""
    return _nonce_of(token, PREFIX, "runner")


# Hub tokens: what a workload gets as HF_TOKEN (`tyh_<nonce>_<mac>`, the attempt's nonce
# under a key of their own), so that it reads its organization's hub repositories and
# nothing else: not the runner API, whose token the runner keeps to itself.
HUB_PREFIX = "tyh"


def hub_token_for(nonce: str) -> str:
    return f"{HUB_PREFIX}_{nonce}_{_mac(nonce, 'hub')}"


def hub_nonce_from(token: str) -> str | None:
    """The nonce of a well-formed, authentic hub token, or None."""
    return _nonce_of(token, HUB_PREFIX, "hub")
