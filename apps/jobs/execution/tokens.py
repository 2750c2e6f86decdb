"""Runner tokens: one per attempt, `tyr_<nonce>_<mac>`, where mac = HMAC-SHA256(SECRET_KEY,
nonce). Only the nonce is stored, so a database dump yields no usable token, and the same
token can be handed to a relaunched runner. Changing SECRET_KEY invalidates live tokens."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

PREFIX = "tyr"


def _mac(nonce: str) -> str:
    key = f"trainyard-runner-token:{settings.SECRET_KEY}".encode()
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def token_for(nonce: str) -> str:
    return f"{PREFIX}_{nonce}_{_mac(nonce)}"


def nonce_from(token: str) -> str | None:
    """The nonce of a well-formed, authentic token, or None."""
    parts = token.split("_")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    nonce, mac = parts[1], parts[2]
    if not hmac.compare_digest(mac, _mac(nonce)):
        return None
    return nonce


# Hub tokens: what a workload gets as HF_TOKEN (`tyh_<nonce>_<mac>`, the attempt's nonce
# under a key of their own), so that it reads its organization's hub repositories and
# nothing else: not the runner API, whose token the runner keeps to itself.
HUB_PREFIX = "tyh"


def _hub_mac(nonce: str) -> str:
    key = f"trainyard-hub-token:{settings.SECRET_KEY}".encode()
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def hub_token_for(nonce: str) -> str:
    return f"{HUB_PREFIX}_{nonce}_{_hub_mac(nonce)}"


def hub_nonce_from(token: str) -> str | None:
    """The nonce of a well-formed, authentic hub token, or None."""
    parts = token.split("_")
    if len(parts) != 3 or parts[0] != HUB_PREFIX:
        return None
    if not hmac.compare_digest(parts[2], _hub_mac(parts[1])):
        return None
    return parts[1]
