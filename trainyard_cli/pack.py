"""Packing a working directory into the tar.gz that `container.workdir` ships.

What goes in is what git would commit: `.gitignore` files (the root's and any below it) are
honoured, `.git` is always left out. The archive is deterministic — sorted entries, owner
0/0, gzip header without a time — so packing the same tree twice gives the same bytes and
the same sha256. Symbolic links are kept only when they stay inside the tree (the server
refuses links that escape it); others are left out and reported.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from trainyard_cli.gitignore import Matcher

ALWAYS_SKIPPED = frozenset({".git"})
IGNORE_FILE = ".gitignore"


@dataclass
class Packed:
    files: list[str] = field(default_factory=list)  # regular files and links, in the archive
    skipped: list[str] = field(default_factory=list)  # ignored paths (a folder counts once)
    unsafe_links: list[str] = field(default_factory=list)
    content_bytes: int = 0


def _read_ignore(directory: Path) -> str:
    try:
        return (directory / IGNORE_FILE).read_text(errors="replace")
    except OSError:
        return ""


def _link_stays_inside(root: Path, link: Path) -> bool:
    target = os.readlink(link)
    if os.path.isabs(target):
        return False
    resolved = os.path.normpath(os.path.join(os.path.dirname(link), target))
    return resolved == str(root) or resolved.startswith(str(root) + os.sep)


def walk(root: Path) -> Iterator[tuple[str, Path, bool | None]]:
    """(relative posix path, path, is_dir) of everything under `root`, parents before
    children, sorted; `is_dir` None for an ignored path, whose contents are never entered."""
    root = root.resolve()
    yield from _walk(root, Matcher().child(_read_ignore(root), ""), "")


def _walk(
    directory: Path, matcher: Matcher, rel_dir: str
) -> Iterator[tuple[str, Path, bool | None]]:
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if entry.name in ALWAYS_SKIPPED or matcher.ignored(rel, is_dir):
            yield rel, Path(entry.path), None  # None: skipped
            continue
        yield rel, Path(entry.path), is_dir
        if is_dir:
            sub = Path(entry.path)
            ignore = _read_ignore(sub)
            child = matcher.child(ignore, rel) if ignore else matcher
            yield from _walk(sub, child, rel)


def _tarinfo(tar: tarfile.TarFile, path: Path, rel: str) -> tarfile.TarInfo:
    info = tar.gettarinfo(str(path), arcname=rel)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_directory(root: Path, out: BinaryIO) -> Packed:
    """Write `root`'s tree as tar.gz to `out`; what went in and what was left out."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    packed = Packed()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, path, is_dir in walk(root):
            if is_dir is None:
                packed.skipped.append(rel)
            elif path.is_symlink():
                if _link_stays_inside(root, path):
                    tar.addfile(_tarinfo(tar, path, rel))
                    packed.files.append(rel)
                else:
                    packed.unsafe_links.append(rel)
            elif is_dir:
                tar.addfile(_tarinfo(tar, path, rel))
            elif path.is_file():
                info = _tarinfo(tar, path, rel)
                with open(path, "rb") as data:
                    tar.addfile(info, data)
                packed.files.append(rel)
                packed.content_bytes += info.size
            # sockets, fifos and devices have no place in a job's code: left out silently
    return packed
