"""Parsing OpenSSH public key lines: the accepted types, the refusals and their words, the
normalised line and the fingerprint (checked against ssh-keygen's own)."""

from __future__ import annotations

import base64
import shutil
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from apps.core.ssh_keys import InvalidPublicKey, parse_blob, parse_public_key
from tests import sshkeys


@pytest.mark.parametrize(
    ("make", "key_type", "bits"),
    [
        (sshkeys.ed25519_line, "ssh-ed25519", 256),
        (lambda: sshkeys.ecdsa_line(ec.SECP256R1), "ecdsa-sha2-nistp256", 256),
        (lambda: sshkeys.ecdsa_line(ec.SECP384R1), "ecdsa-sha2-nistp384", 384),
        (lambda: sshkeys.ecdsa_line(ec.SECP521R1), "ecdsa-sha2-nistp521", 521),
        (lambda: sshkeys.rsa_line(2048), "ssh-rsa", 2048),
        (sshkeys.sk_ed25519_line, "sk-ssh-ed25519@openssh.com", 256),
        (sshkeys.sk_ecdsa_line, "sk-ecdsa-sha2-nistp256@openssh.com", 256),
    ],
)
def test_each_accepted_type_parses_and_normalises(make, key_type, bits):
    line = make()
    parsed = parse_public_key(f"  {line}   me@laptop  extra words \n")
    assert (parsed.key_type, parsed.bits) == (key_type, bits)
    assert parsed.line == line
    assert parsed.comment == "me@laptop  extra words"
    assert parsed.fingerprint.startswith("SHA256:") and not parsed.fingerprint.endswith("=")
    assert parse_blob(sshkeys.blob_of(line)) == parsed.__class__(key_type, parsed.blob, "", bits)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")
def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path):
    line = sshkeys.ed25519_line("me@host")
    (tmp_path / "k.pub").write_text(line + "\n")
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    assert parse_public_key(line).fingerprint == printed


def _flip_type(line: str, other: bytes) -> str:
    blob = sshkeys.blob_of(line)
    (length,) = struct.unpack(">I", blob[:4])
    return f"ssh-ed25519 {base64.b64encode(sshkeys.string(other) + blob[4 + length :]).decode()}"


# Ids from the expected words: several texts are keys made at random, which would name the
# test differently on each pytest-xdist worker.
REFUSED = [
    ("", "Paste a public key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----", "private"),
    (sshkeys.ed25519_line() + "\n" + sshkeys.ed25519_line(), "one key at a time"),
    ("ssh-dss AAAAB3NzaC1kc3M= x", "DSA"),
    ("ssh-foo AAAA x", "key type 'ssh-foo' is not accepted"),
    ('from="10.0.0.1" ' + sshkeys.ed25519_line(), "is not accepted"),
    ("ssh-ed25519", "base64 part is missing"),
    ("ssh-ed25519 not-base64!", "not base64"),
    ("ssh-ed25519 " + sshkeys.ed25519_line().split()[1][:-8], "cut short"),
    (sshkeys.blob_line(b"ssh-ed25519", b"x" * 31), "32 bytes"),
    (sshkeys.blob_line(b"ssh-ed25519", b"x" * 32, b"more"), "after its end"),
    (sshkeys.blob_line(b"ecdsa-sha2-nistp256", b"nistp384", b"\x04" * 65), "curve"),
    (sshkeys.blob_line(b"ecdsa-sha2-nistp256", b"nistp256", b"\x04" * 64), "point"),
    (_flip_type(sshkeys.rsa_line(2048), b"ssh-rsa"), "is not a ssh-ed25519 key"),
]


@pytest.mark.parametrize(("text", "words"), REFUSED, ids=[words for _, words in REFUSED])
def test_anything_else_is_refused_with_a_reason(text, words):
    with pytest.raises(InvalidPublicKey, match=words):
        parse_public_key(text)


def test_rsa_under_2048_bits_is_refused_saying_so():
    with pytest.raises(InvalidPublicKey, match="1024 bits; at least 2048"):
        parse_public_key(sshkeys.rsa_line(1024))


def test_a_blob_that_is_not_a_key_is_refused():
    for blob in (b"", b"\x00\x00", b"\x00\x00\x00\x03\xff\xfe\xfd"):
        with pytest.raises(InvalidPublicKey):
            parse_blob(blob)
