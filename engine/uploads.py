"""`PUT /trainyard/adapters/<name>`: an adapter directory, as a tar.gz, into `adapters_dir`.

The body is written to a temporary file beside its destination while its SHA-256 is taken,
checked against `X-Trainyard-SHA256` when that is sent, unpacked by the runner's strict rules
(`runner.artifacts.safe_extract`: no absolute names, no `..`, no link leading out, nothing
written through a link) into a temporary directory, and only then renamed to
`<adapters_dir>/<name>`. A failed upload leaves nothing behind; an upload to a name that is
not loaded replaces an earlier upload of it (a retried upload is harmless).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import tarfile
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path

from engine.errors import ApiError, invalid
from runner.artifacts import UnsafeArchive, safe_extract

SHA256_PATTERN = re.compile(r"[0-9a-fA-F]{64}")
_rename_lock = threading.Lock()


def store_adapter(
    chunks: Iterable[bytes], *, name: str, adapters_dir: str | Path, sha256: str | None
) -> Path:
    """Unpack the archive read from `chunks` into `<adapters_dir>/<name>`; that directory.

    Raises ApiError 400: `checksum_mismatch`, or `invalid_request` for a bad digest header or
    an archive that is not a safe tar.gz of an adapter (adapter_config.json at its root).
    """
    if sha256 is not None and not SHA256_PATTERN.fullmatch(sha256):
        raise invalid("X-Trainyard-SHA256 must be 64 hexadecimal digits")
    root = Path(adapters_dir)
    root.mkdir(parents=True, exist_ok=True)
    tag = f"{name}-{secrets.token_hex(4)}"
    archive, unpacked = root / f".upload-{tag}.tar.gz", root / f".unpack-{tag}"
    try:
        digest = hashlib.sha256()
        with open(archive, "xb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise ApiError(
                400,
                "checksum_mismatch",
                f"the body's SHA-256 is {digest.hexdigest()}, not {sha256.lower()}",
            )
        try:
            safe_extract(archive, unpacked)
        except (UnsafeArchive, tarfile.TarError, OSError, EOFError, zlib.error) as error:
            raise invalid(f"the body is not a usable tar.gz: {error}") from None
        if not (unpacked / "adapter_config.json").is_file():
            raise invalid("the archive has no adapter_config.json at its root")
        destination = root / name
        with _rename_lock:
            if destination.exists():
                shutil.rmtree(destination)
            os.rename(unpacked, destination)
        return destination
    finally:
        archive.unlink(missing_ok=True)
        if unpacked.exists():
            shutil.rmtree(unpacked, ignore_errors=True)
