"""Uploads shared by several commands: a packed working directory and a dataset file, each
sent as a raw body with a progress bar."""

from __future__ import annotations

import tempfile
from pathlib import Path

from trainyard_cli import output
from trainyard_cli.client import Client, UsageError
from trainyard_cli.commands import seg
from trainyard_cli.pack import pack_directory
from trainyard_cli.progress import file_chunks, human_size, transfer

DATASET_TYPES = {
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".csv": "text/csv",
}


def upload_file(
    client: Client, path: str, file: Path, content_type: str, params: dict | None = None
) -> dict:
    size = file.stat().st_size
    with transfer(f"Uploading {file.name}", size) as (progress, task):
        return client.post_stream(
            path,
            file_chunks(file, progress, task),
            size=size,
            content_type=content_type,
            params=params,
        )


def upload_workdir(client: Client, directory: str) -> dict:
    """Pack `directory` (honouring .gitignore) and upload it; the API's workdir object."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise UsageError(f"--workdir {directory}: not a directory.")
    with tempfile.TemporaryDirectory(prefix="trainyard-") as tmp:
        archive = Path(tmp) / "workdir.tar.gz"
        with open(archive, "wb") as out:
            packed = pack_directory(root, out)
        output.info(
            f"Packed {len(packed.files)} files ({human_size(packed.content_bytes)}) from "
            f"{root} into {human_size(archive.stat().st_size)}; "
            f"{len(packed.skipped)} ignored paths left out."
        )
        for link in packed.unsafe_links:
            output.info(f"Left out {link}: a symbolic link that points outside the directory.")
        return upload_file(client, "/api/v1/compute/workdirs", archive, "application/gzip")


def upload_dataset(
    client: Client, project_id: str, file: str, *, name: str | None, fmt: str | None
) -> dict:
    path = Path(file).expanduser()
    if not path.is_file():
        raise UsageError(f"{file}: no such file.")
    content_type = DATASET_TYPES.get(path.suffix.lower(), "application/octet-stream")
    params = {"name": name or path.stem, "format": fmt, "filename": path.name}
    return upload_file(
        client, f"/api/v1/projects/{seg(project_id)}/datasets", path, content_type, params
    )
