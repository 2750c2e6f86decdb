"""An adapter as the engine takes it: one tar.gz with `adapter_config.json` at its top,
uploaded with its size and SHA-256 (`engine_client.load_adapter`).

An artifact of a job is that archive already. An adapter in the hub is a commit's files: the
archive is made from its top-level files (a repository's subfolders, such as another
adapter or a checkpoint, are not part of it), spooled to disk past a few megabytes while its
SHA-256 is taken.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import IO

from django.core.files.storage import default_storage

from apps.core.stored_files import StoredFileMissing
from apps.hub import blobs, repos
from apps.hub.errors import EntryNotFound
from apps.hub.models import HubCommit
from apps.jobs.models import Artifact

ADAPTER_CONFIG = "adapter_config.json"
MAX_CONFIG_BYTES = 64 * 1024
SPOOL_BYTES = 8 * 1024 * 1024
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Archive:
    stream: IO[bytes]
    size: int
    sha256: str

    def chunks(self) -> Iterator[bytes]:
        while chunk := self.stream.read(CHUNK):
            yield chunk


def adapter_config(commit: HubCommit) -> dict | None:
    """The commit's top-level adapter_config.json, parsed; None when there is none (or it
    is not a JSON object)."""
    try:
        item = repos.file_at(commit, ADAPTER_CONFIG)
    except EntryNotFound:
        return None
    if item.blob.size_bytes > MAX_CONFIG_BYTES:
        return None
    try:
        with closing(blobs.open_blob(item.blob)) as stream:
            data = json.loads(stream.read(MAX_CONFIG_BYTES))
    except (StoredFileMissing, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def archive_of(source) -> Iterator[Archive]:
    """The archive of what `source` serves: an EndpointRevision or a PlaygroundAdapter
    (either has an `artifact` or a `hub_commit`)."""
    if source.artifact is not None:
        with artifact_archive(source.artifact) as archive:
            yield archive
    else:
        with hub_archive(source.hub_commit) as archive:
            yield archive


@contextmanager
def artifact_archive(artifact: Artifact) -> Iterator[Archive]:
    with default_storage.open(artifact.storage_path, "rb") as stored:
        yield Archive(stream=stored, size=artifact.size_bytes, sha256=artifact.sha256)


@contextmanager
def hub_archive(commit: HubCommit) -> Iterator[Archive]:
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        with tarfile.open(fileobj=spool, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for item in repos.tree(commit):
                if "/" in item.path:
                    continue
                info = tarfile.TarInfo(item.path)
                info.size = item.blob.size_bytes
                info.mode = 0o644
                with closing(blobs.open_blob(item.blob)) as stream:
                    tar.addfile(info, stream)
        size = spool.tell()
        spool.seek(0)
        digest = hashlib.sha256()
        while chunk := spool.read(CHUNK):
            digest.update(chunk)
        spool.seek(0)
        yield Archive(stream=spool, size=size, sha256=digest.hexdigest())
