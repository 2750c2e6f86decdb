"""The workload's code: the job's uploaded archive and inline files, put into its working
directory before it starts (docs/runner-protocol.md, "The working directory").

The spec's `workdir` is `{"id", "format", "download_url", "sha256", "size_bytes"}` (or
null) and its `files` a `{relative path: text}` object. The runner:

1. downloads the archive with its token (from the control plane's own origin only) into
   `{workdir}/workdir.archive.part`, retrying while the control plane is away, and checks its
   size and SHA-256;
2. unpacks it into a fresh `{workdir}/workdir.unpack` with `runner.archive.extract`, which
   checks every member again (no escape, no link out, no special file), then moves what it
   holds into the working directory (replacing what a relaunched runner left there);
3. writes `files` (UTF-8), never through a link, replacing a file the archive holds.

Anything wrong is a `WorkdirError` naming the archive or file; the workload does not start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.archive import FORMATS, ArchiveError, extract, safe_relative
from runner.client import (
    ClientError,
    ControlClient,
    RetryableError,
    StopWhen,
    SupersededError,
    log_retry,
    retrying,
)
from runner.files import sha256_of

ARCHIVE_PART = "workdir.archive.part"
UNPACK_DIR = "workdir.unpack"


class WorkdirError(Exception):
    """The working directory could not be prepared; the workload cannot start."""


def _remove(path: Path) -> None:
    """Remove a file, link or directory tree (links are removed, never followed)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _download(
    client: ControlClient,
    workdir_spec: dict,
    part: Path,
    *,
    deadline: float,
    stop: StopWhen,
    on_retry: Callable[[int, RetryableError, float], object] | None,
) -> None:
    url, sha256, size = (
        workdir_spec.get("download_url"),
        workdir_spec.get("sha256"),
        workdir_spec.get("size_bytes"),
    )
    if not isinstance(url, str) or not url or not isinstance(sha256, str) or not sha256:
        raise WorkdirError("the spec's workdir needs download_url and sha256")
    with open(part, "w+b") as out:
        retrying(
            lambda: client.download(url, out),
            deadline=deadline,
            stop=stop,
            on_retry=on_retry,
        )
    actual_size = part.stat().st_size
    if isinstance(size, int) and not isinstance(size, bool) and actual_size != size:
        raise WorkdirError(f"the archive downloaded is {actual_size} bytes, not {size}")
    actual = sha256_of(part)
    if actual != sha256.lower():
        raise WorkdirError(f"the archive downloaded hashes to {actual}, not {sha256}")


def _move_into(unpacked: Path, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for entry in sorted(unpacked.iterdir()):
        target = work / entry.name
        if os.path.lexists(target):
            _remove(target)
        os.replace(entry, target)


def write_files(files: Any, work: Path) -> list[str]:
    """Write the spec's inline `files` into `work`; their normalised paths. A parent that
    is a link (the archive may hold links) is refused rather than written through."""
    if files is None:
        return []
    if not isinstance(files, dict):
        raise WorkdirError("the spec's files is not an object")
    written = []
    for raw, text in files.items():
        try:
            name = safe_relative(str(raw), what="file")
        except ArchiveError as exc:
            raise WorkdirError(str(exc)) from exc
        if not isinstance(text, str):
            raise WorkdirError(f"file {raw!r}: its content is not text")
        target = work / name
        current = work
        for part in name.split("/")[:-1]:
            current = current / part
            if current.is_symlink():
                raise WorkdirError(f"file {raw!r}: {part!r} is a link; not writing through it")
            current.mkdir(exist_ok=True)
        if os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                raise WorkdirError(f"file {raw!r}: a directory of that name exists")
            target.unlink()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(target, flags, 0o644), "w", encoding="utf-8") as out:
            out.write(text)
        written.append(name)
    return written


def prepare_workdir(
    client: ControlClient,
    workdir_spec: Any,
    files: Any,
    *,
    workdir: Path,
    work: Path,
    deadline: float,
    should_stop: Callable[[], bool],
    sleep: Callable[[float], object],
    on_retry: Callable[[int, RetryableError, float], object] | None = log_retry,
) -> str:
    """Unpack the spec's archive into `work`, then write its `files`; a summary for the
    job's log. Raises WorkdirError saying why, except SupersededError, which propagates."""
    summary = []
    if workdir_spec is not None:
        if not isinstance(workdir_spec, dict):
            raise WorkdirError("the spec's workdir is not an object")
        fmt = workdir_spec.get("format")
        if fmt not in FORMATS:
            raise WorkdirError(f"the archive's format {fmt!r} is not one of {FORMATS}")
        part = workdir / ARCHIVE_PART
        unpacked = workdir / UNPACK_DIR
        try:
            _download(
                client,
                workdir_spec,
                part,
                deadline=deadline,
                stop=StopWhen(should_stop, sleep),
                on_retry=on_retry,
            )
            _remove(unpacked)
            members = extract(part, fmt, unpacked)
            _move_into(unpacked, work)
        except SupersededError:
            raise
        except (ClientError, ArchiveError, OSError, WorkdirError) as exc:
            raise WorkdirError(f"archive {workdir_spec.get('id', '')}: {exc}") from exc
        except Exception as exc:  # a damaged archive must fail the job, never the runner
            raise WorkdirError(f"archive {workdir_spec.get('id', '')}: {exc!r}") from exc
        finally:
            part.unlink(missing_ok=True)
            if unpacked.exists():
                shutil.rmtree(unpacked, ignore_errors=True)
        summary.append(
            f"unpacked {workdir_spec.get('id', 'the archive')} ({len(members)} members, "
            f"{workdir_spec.get('size_bytes')} bytes, sha256 {workdir_spec.get('sha256')})"
        )
    try:
        written = write_files(files, work)
    except OSError as exc:
        raise WorkdirError(f"could not write the files: {exc}") from exc
    if written:
        summary.append(f"wrote {len(written)} file(s): {', '.join(written[:10])}")
        if len(written) > 10:
            summary[-1] += ", …"
    return "; ".join(summary)
