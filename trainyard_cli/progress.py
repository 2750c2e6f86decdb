"""Progress bars for uploads and downloads, on stderr (stdout stays for results and JSON).

rich draws a live bar on a terminal; elsewhere (a CI log, a test) it prints the finished bar
once instead of a stream of redraws.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from trainyard_cli.output import err

CHUNK = 256 * 1024


@contextmanager
def transfer(description: str, total: int | None) -> Iterator[tuple[Progress, TaskID]]:
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err(),
    ) as progress:
        yield progress, progress.add_task(description, total=total)


def file_chunks(path: Path, progress: Progress, task: TaskID) -> Iterator[bytes]:
    """The file's bytes in chunks, advancing the bar as each is handed to the socket."""
    with open(path, "rb") as data:
        while chunk := data.read(CHUNK):
            yield chunk
            progress.advance(task, len(chunk))


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
