"""OpenSSH public key lines for tests, made with `cryptography` (and by hand for the FIDO
`sk-` types, which need a security key to make for real)."""

from __future__ import annotations

import base64
import struct

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def _line(public_key) -> str:
    return public_key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


def ed25519_line(comment: str = "") -> str:
    line = _line(ed25519.Ed25519PrivateKey.generate().public_key())
    return f"{line} {comment}".strip()


def ecdsa_line(curve=ec.SECP256R1, comment: str = "") -> str:
    line = _line(ec.generate_private_key(curve()).public_key())
    return f"{line} {comment}".strip()


def rsa_line(bits: int = 2048, comment: str = "") -> str:
    line = _line(rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key())
    return f"{line} {comment}".strip()


def string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def blob_line(*fields: bytes) -> str:
    blob = b"".join(string(f) for f in fields)
    return f"{fields[0].decode()} {base64.b64encode(blob).decode()}"


def sk_ed25519_line() -> str:
    raw = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    return blob_line(b"sk-ssh-ed25519@openssh.com", raw, b"ssh:")


def sk_ecdsa_line() -> str:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return blob_line(b"sk-ecdsa-sha2-nistp256@openssh.com", b"nistp256", point, b"ssh:")


def blob_of(line: str) -> bytes:
    return base64.b64decode(line.split()[1])
