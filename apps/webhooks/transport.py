"""One HTTP POST of a delivery to a vetted target.

It connects to the address `targets.vet` checked, never letting the client resolve the
name again (a DNS answer that changed between the check and the connect cannot steer it to
an internal address): the URL carries the IP, the Host header and the TLS server name
(SNI, and so certificate verification) carry the host. Redirects are not followed (a 3xx is
a failed attempt), proxies from the environment are not used, and only the first bytes of
the response are kept for the log.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import httpx

from apps.webhooks.targets import Target

KEEP_RESPONSE_BYTES = 1024


@dataclass(frozen=True)
class Response:
    status_code: int
    excerpt: str


def _netloc(target: Target) -> str:
    address = target.address.split("%", 1)[0]
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"{host}:{target.port}"


def post(target: Target, body: bytes, headers: dict[str, str], *, timeout_s: float) -> Response:
    """POST `body` to `target`; raises httpx.HTTPError when no response came back."""
    url = f"{target.scheme}://{_netloc(target)}{target.path}"
    default_port = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host  # an IPv6 literal
    host_header = host if target.port == default_port else f"{host}:{target.port}"
    with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
        request = client.build_request(
            "POST",
            url,
            content=body,
            headers={**headers, "Host": host_header},
            extensions={"sni_hostname": target.host},
        )
        response = client.send(request, stream=True)
        try:
            excerpt = b""
            for chunk in response.iter_bytes():
                excerpt += chunk
                if len(excerpt) >= KEEP_RESPONSE_BYTES:
                    break
        finally:
            response.close()
    return Response(
        status_code=response.status_code,
        excerpt=excerpt[:KEEP_RESPONSE_BYTES].decode("utf-8", "replace"),
    )
