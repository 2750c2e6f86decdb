"""The SSH gateway's host key: made once (Ed25519) and kept where SSH_GATEWAY_HOST_KEY says,
so clients that pinned it keep trusting the gateway across restarts. The API and the job
page show its public line and fingerprint, which `trainyard ssh` pins for the user."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings


@dataclass(frozen=True)
class HostKey:
    private_pem: bytes  # OpenSSH private key format
    public: str  # "ssh-ed25519 AAAA..."
    fingerprint: str  # "SHA256:..." as `ssh-keygen -l` prints it


def fingerprint_of(public_line: str) -> str:
    """The SHA256 fingerprint of an OpenSSH public key line, as OpenSSH prints it."""
    blob = base64.b64decode(public_line.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def load_or_create(path: Path) -> HostKey:
    """The key at `path`, made (mode 0600, its directory 0700) when there is none yet. Two
    processes making it at once both end up with the one that was linked into place first."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        try:
            os.link(staging, path)  # fails when another process put its key there first
        except FileExistsError:
            pass
        finally:
            staging.unlink()
    pem = path.read_bytes()
    key = serialization.load_ssh_private_key(pem, password=None)
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return HostKey(private_pem=pem, public=public, fingerprint=fingerprint_of(public))


@cache
def gateway_host_key() -> HostKey:
    """This control plane's gateway host key (made on first use)."""
    return load_or_create(Path(settings.SSH_GATEWAY_HOST_KEY))
