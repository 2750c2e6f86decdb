"""OpenSSH public keys: parsing a pasted line into its type, blob, comment and fingerprint.

One parser for every place that takes a public key (a job's `access.ssh_public_key`, a
member's registered keys), so that the control plane and its SSH gateway agree on what a
key is. The blob is read field by field as RFC 4253/5656 and OpenSSH's PROTOCOL.u2f lay it
out, so a line whose type says one thing and whose blob another, or that is cut short, is
refused here and not at the gateway. Accepted: Ed25519, ECDSA on the three NIST curves, RSA
of at least 2048 bits, and the FIDO (`sk-`) variants of Ed25519 and ECDSA P-256. DSA (which
OpenSSH itself dropped) and shorter RSA are refused with a message that says so.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

MIN_RSA_BITS = 2048
ED25519_KEY_BYTES = 32
ECDSA_CURVES = {
    "ecdsa-sha2-nistp256": "nistp256",
    "ecdsa-sha2-nistp384": "nistp384",
    "ecdsa-sha2-nistp521": "nistp521",
    "sk-ecdsa-sha2-nistp256@openssh.com": "nistp256",
}
# Bytes of an uncompressed point (0x04 || X || Y) on each curve.
ECDSA_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}
SSH_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        *ECDSA_CURVES,
        "sk-ssh-ed25519@openssh.com",
    }
)
# A pasted key line is short; anything longer is not one key (RSA 16384 is ~2.8 kB).
MAX_LINE_CHARS = 16384
EXAMPLE = "ssh-ed25519 AAAA… you@host"


class InvalidPublicKey(ValueError):
    """Not an accepted OpenSSH public key; the message says why, in words for a person."""


@dataclass(frozen=True)
class PublicKey:
    key_type: str  # "ssh-ed25519"
    blob: bytes  # the wire encoding, as an SSH client presents it
    comment: str  # what followed the blob on the line ("you@host"), may be empty
    bits: int  # the key's size: 256 for Ed25519, the modulus for RSA, the curve's for ECDSA

    @property
    def line(self) -> str:
        """The key normalised to `<type> <base64>`, without its comment."""
        return f"{self.key_type} {base64.b64encode(self.blob).decode()}"

    @property
    def fingerprint(self) -> str:
        return fingerprint_of_blob(self.blob)


def fingerprint_of_blob(blob: bytes) -> str:
    """`SHA256:<base64, unpadded>` as `ssh-keygen -l` and sshd's logs print it."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def string(self) -> bytes:
        if len(self.data) - self.at < 4:
            raise InvalidPublicKey("The key is cut short.")
        (length,) = struct.unpack(">I", self.data[self.at : self.at + 4])
        start = self.at + 4
        if len(self.data) - start < length:
            raise InvalidPublicKey("The key is cut short.")
        self.at = start + length
        return self.data[start : self.at]

    def done(self) -> None:
        if self.at != len(self.data):
            raise InvalidPublicKey("The key has bytes after its end.")


def _bits_of(key_type: str, reader: _Reader) -> int:
    """Read the fields after the type name; the key's size in bits."""
    if key_type in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
        if len(reader.string()) != ED25519_KEY_BYTES:
            raise InvalidPublicKey("An Ed25519 key is 32 bytes; this one is not.")
        bits = 256
    elif key_type == "ssh-rsa":
        exponent, modulus = reader.string(), reader.string()
        if not exponent or not modulus:
            raise InvalidPublicKey("The RSA key has no exponent or modulus.")
        bits = int.from_bytes(modulus, "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise InvalidPublicKey(
                f"This RSA key has {bits} bits; at least {MIN_RSA_BITS} are needed "
                "(or use Ed25519: `ssh-keygen -t ed25519`)."
            )
    else:
        curve = ECDSA_CURVES[key_type]
        if reader.string() != curve.encode():
            raise InvalidPublicKey(f"The key's curve is not {curve}, as its type says.")
        if len(reader.string()) != ECDSA_POINT_BYTES[curve]:
            raise InvalidPublicKey(f"The key's point is not one on {curve}.")
        bits = int(curve.removeprefix("nistp"))
    if key_type.startswith("sk-"):
        reader.string()  # the FIDO application, e.g. "ssh:"
    return bits


def parse_public_key(text: str) -> PublicKey:
    """The one key on `text` (`<type> <base64> [comment]`, as in `~/.ssh/id_ed25519.pub`);
    InvalidPublicKey, saying why, for anything else."""
    text = (text or "").strip()
    if not text:
        raise InvalidPublicKey(f"Paste a public key, e.g. {EXAMPLE!r}.")
    if len(text) > MAX_LINE_CHARS:
        raise InvalidPublicKey("That is too long for one public key.")
    if "PRIVATE KEY" in text:
        raise InvalidPublicKey(
            "That is a private key: keep it to yourself, and paste the public one (the .pub "
            "file) instead."
        )
    if "\n" in text or "\r" in text:
        raise InvalidPublicKey("Paste one key at a time, on one line.")
    parts = text.split(None, 2)
    key_type = parts[0]
    if key_type == "ssh-dss":
        raise InvalidPublicKey(
            "DSA keys are not accepted (OpenSSH dropped them); use `ssh-keygen -t ed25519`."
        )
    if key_type not in SSH_KEY_TYPES:
        accepted = ", ".join(sorted(SSH_KEY_TYPES))
        raise InvalidPublicKey(
            f"The key type {key_type[:40]!r} is not accepted (accepted: {accepted}); paste "
            "one line as in ~/.ssh/id_ed25519.pub."
        )
    if len(parts) < 2:
        raise InvalidPublicKey("The key's base64 part is missing.")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidPublicKey("The key's second part is not base64.") from exc
    reader = _Reader(blob)
    if reader.string() != key_type.encode():
        raise InvalidPublicKey(f"The key's data is not a {key_type} key, as its type says.")
    bits = _bits_of(key_type, reader)
    reader.done()
    comment = parts[2].strip() if len(parts) > 2 else ""
    return PublicKey(key_type=key_type, blob=blob, comment=comment, bits=bits)


def parse_blob(blob: bytes) -> PublicKey:
    """A key as an SSH client presents it on the wire (the blob alone); InvalidPublicKey
    when it is not an accepted one."""
    try:
        (length,) = struct.unpack(">I", blob[:4])
        key_type = blob[4 : 4 + length].decode("ascii")
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidPublicKey("Not an SSH public key.") from exc
    return parse_public_key(f"{key_type} {base64.b64encode(blob).decode()}")
