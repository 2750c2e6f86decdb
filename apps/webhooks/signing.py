"""Signing a delivery: `Trainyard-Signature: t=<unix seconds>,v1=<hex>` where the hex is the
HMAC-SHA256, keyed with the webhook's secret, of `"<t>.<body>"` (the raw body bytes).

A receiver recomputes it over the body it received, compares in constant time and refuses
a timestamp too far from its clock (replays). `docs/webhooks.md` shows it in Python.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(secret: str, header: str, body: bytes, *, now: int, tolerance_s: int = 300) -> bool:
    """Whether `header` signs `body` with `secret` within `tolerance_s` of `now` (what a
    receiver does; kept here so the docs' snippet and the tests agree with the signer)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), fields.get("v1", ""))
