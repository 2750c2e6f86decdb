"""Where a webhook may point: SSRF checks, when a webhook is saved and again at delivery.

A target is an http or https URL without credentials whose host resolves only to public
addresses. Loopback, private (RFC 1918, unique-local), link-local (cloud metadata at
169.254.169.254), shared (100.64/10), multicast, reserved and unspecified addresses are
refused, IPv4 and IPv6 alike, an IPv4-mapped IPv6 address by its IPv4 address. A host with
any refused address is refused, so a name that resolves both ways cannot slip through.

Delivery resolves again (DNS may have changed since the save) and connects to the address
it vetted, never re-resolving (see `transport`). The operator setting
`WEBHOOK_ALLOW_PRIVATE_TARGETS` turns the address check off (an on-premises receiver; the
tests' loopback receiver); the scheme and credential checks stay.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from apps.core.errors import InvalidRequest

URL_PARAM = "url"


class WebhookUrlInvalid(InvalidRequest):
    error_type = "webhook_url_invalid"
    default_detail = "The webhook URL must be an http or https URL with a host."


class WebhookUrlUnresolvable(InvalidRequest):
    error_type = "webhook_url_unresolvable"
    default_detail = "The webhook URL's host does not resolve."


class WebhookUrlForbidden(InvalidRequest):
    error_type = "webhook_url_forbidden"
    default_detail = "The webhook URL points at an address this server does not call."


@dataclass(frozen=True)
class Target:
    """A vetted target: the URL's parts and the address to connect to."""

    scheme: str
    host: str  # as written in the URL (what the Host header and TLS name carry)
    port: int
    path: str  # path and query, at least "/"
    address: str  # the vetted IP address to connect to


def forbidden_reason(address: str) -> str | None:
    """Why an IP address may not be called (`loopback`, `private`…), or None if it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for reason, flagged in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flagged:
            return reason
    if not ip.is_global:  # shared address space (100.64/10) and other special ranges
        return "non-public"
    return None


def _parts(url: str) -> tuple[str, str, int, str]:
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError as exc:
        raise WebhookUrlInvalid(param=URL_PARAM) from exc
    scheme = split.scheme.lower()
    if scheme not in ("http", "https") or not split.hostname:
        raise WebhookUrlInvalid(param=URL_PARAM)
    if split.username is not None or split.password is not None:
        raise WebhookUrlInvalid(
            "The webhook URL may not carry credentials: the signature authenticates us.",
            param=URL_PARAM,
        )
    path = split.path or "/"
    if split.query:
        path = f"{path}?{split.query}"
    return scheme, split.hostname, port or (443 if scheme == "https" else 80), path


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookUrlUnresolvable(
            f"The host {host!r} does not resolve.", param=URL_PARAM
        ) from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise WebhookUrlUnresolvable(f"The host {host!r} does not resolve.", param=URL_PARAM)
    return addresses


def vet(url: str) -> Target:
    """The URL as a target to connect to, or an InvalidRequest (param `url`):
    `webhook_url_invalid`, `webhook_url_unresolvable` or `webhook_url_forbidden`."""
    scheme, host, port, path = _parts(url)
    addresses = _resolve(host, port)
    if not settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason is not None:
                raise WebhookUrlForbidden(
                    f"The host {host!r} resolves to {address}, a {reason} address; webhooks "
                    "call public addresses only (the operator setting "
                    "WEBHOOK_ALLOW_PRIVATE_TARGETS allows others).",
                    param=URL_PARAM,
                )
    return Target(scheme=scheme, host=host, port=port, path=path, address=addresses[0])
