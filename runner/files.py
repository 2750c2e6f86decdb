"""Small file helpers the runner's own modules share (standard library only)."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK_BYTES = 1024 * 1024


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file, read a chunk at a time so a large download or archive never
    sits in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
