"""Code archives (a job's `container.workdir`): the rules a member must follow, and unpacking
one safely. Standard library only, on any python3 >= 3.9.

One module for both sides, so they cannot drift: the control plane checks an upload with
`check_archive` before storing it (a bad archive is refused at once), and the runner checks
every member again while it unpacks (`extract`): it trusts nothing it downloads.

The rules (a member that breaks one refuses the whole archive):

- a tar.gz or a zip, told by its first bytes, never by its name;
- a member's name is relative, without `..`, NUL or a drive, and not under a symbolic link
  of the archive (so nothing is ever written through a link);
- a symbolic link's target is relative and, resolved inside the archive (through its other
  links, as the kernel would), stays inside the root;
- a hard link names a regular file that came earlier in the archive (it is unpacked as a
  copy, so it can never share an inode with a file outside);
- regular files, directories and links only: no devices, FIFOs or sockets; no encrypted
  zip members;
- at most `max_members` members and `max_unpacked_bytes` in all.

`tarfile`'s own `filter="data"` does much of this, but only from 3.11.4 (3.9.17, 3.10.12),
and the images jobs run in have older ones (Debian bookworm's python3 is 3.11.2), so the
checks are ours. Modes keep the executable bits only (no setuid, setgid, sticky, or write
for group and others); owners and times are not restored.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple

FORMAT_TAR_GZ = "tar.gz"
FORMAT_ZIP = "zip"
FORMATS = (FORMAT_TAR_GZ, FORMAT_ZIP)
MAX_MEMBERS = 100_000
MAX_UNPACKED_BYTES = 4 * 1024**3
MAX_LINK_HOPS = 40  # as the kernel's MAXSYMLINKS
MAX_ZIP_LINK_BYTES = 4096
CHUNK_BYTES = 1024 * 1024
# What the decompressed tar stream may hold beyond its members' data: per member, a header
# block, padding and long-name or pax records; once, the end-of-archive blocks and the
# record padding (tar's default record is 10 KiB; 1 MiB allows a blocking factor of 2048).
TAR_HEADER_ROOM = 4096
TAR_TAIL_ROOM = 1024 * 1024
# What reading a damaged archive may raise besides ArchiveError: turned into ArchiveError.
READ_ERRORS = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    NotImplementedError,  # a zip compression method this Python lacks
    UnicodeError,
    ValueError,
    OSError,
)

FILE, DIRECTORY, SYMLINK, HARDLINK = "file", "directory", "symlink", "hardlink"


class ArchiveError(Exception):
    """The archive breaks a rule; the message names the member and the rule."""


class Member(NamedTuple):
    name: str  # normalised: relative, no `.`/`..` parts, no trailing slash
    kind: str  # FILE, DIRECTORY, SYMLINK or HARDLINK
    size: int  # bytes a regular file unpacks to; 0 for the others
    mode: int  # permission bits to set (already filtered)
    link: str  # a symlink's target as written, or a hard link's (normalised) member


def detect_format(fileobj: IO[bytes]) -> str | None:
    """`"tar.gz"`, `"zip"` or None, from the first bytes; the position is restored."""
    start = fileobj.tell()
    head = fileobj.read(4)
    fileobj.seek(start)
    if head[:2] == b"\x1f\x8b":
        return FORMAT_TAR_GZ
    if head in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip, or an empty one
        return FORMAT_ZIP
    return None


def normalise_name(raw: str, *, what: str = "member") -> str:
    """The member name as a clean relative path; ArchiveError when it is absolute, has
    `..`, NUL or a drive. `""` for the root itself (`./`)."""
    if "\x00" in raw:
        raise ArchiveError(f"{what} {raw!r}: the name holds a NUL byte")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":" and raw[0].isalpha()):
        raise ArchiveError(f"{what} {raw!r}: absolute paths are not allowed")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"{what} {raw!r}: '..' is not allowed")
    return "/".join(parts)


def _file_mode(mode: int) -> int:
    return (mode & 0o755) | 0o600


def _dir_mode(mode: int) -> int:
    return (mode & 0o755) | 0o700


class _Budget:
    """What an archive may unpack to, counted as each header is read, so a member
    declaring more than is allowed is refused before a byte of its data is inflated."""

    def __init__(self, *, max_members: int, max_unpacked_bytes: int) -> None:
        self.max_members = max_members
        self.max_unpacked_bytes = max_unpacked_bytes
        self.members = 0
        self.total = 0

    def add(self, raw_name: str, size: int) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveError(f"more than {self.max_members} members")
        self.total += max(size, 0)
        if self.total > self.max_unpacked_bytes:
            raise ArchiveError(
                f"member {raw_name!r}: it unpacks to {self.total} bytes or more, more than "
                f"the {self.max_unpacked_bytes} allowed"
            )

    def stream_limit(self) -> int:
        """The most of the decompressed tar stream that may be read so far: the members'
        data, room for their headers (long names and pax records included) and the
        archive's end-of-archive blocks and record padding."""
        return self.total + TAR_HEADER_ROOM * (self.members + 1) + TAR_TAIL_ROOM


class _BoundedStream:
    """The decompressed tar stream as `tarfile` reads it, refused (ArchiveError) the moment
    a read or seek would go past `budget.stream_limit()`: skipping a member's data, a pax
    header declaring gigabytes, or gigabytes of zeros after the end-of-archive blocks are
    never inflated beyond that. `inflated` counts the bytes decompressed."""

    def __init__(self, raw: IO[bytes], budget: _Budget) -> None:
        self._raw = raw
        self._budget = budget
        self.inflated = 0

    def _refuse(self) -> ArchiveError:
        return ArchiveError(
            "the tar stream is longer than its members account for (oversized headers or "
            "data after the end of the archive)"
        )

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, size: int | None = -1) -> bytes:
        room = self._budget.stream_limit() - self._raw.tell()
        want = room + 1 if size is None or size < 0 else min(size, room + 1)
        data = self._raw.read(max(want, 0))
        self.inflated += len(data)
        if self._raw.tell() > self._budget.stream_limit():
            raise self._refuse()
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self._raw.tell() + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR) or target > self._budget.stream_limit():
            raise self._refuse()
        before = self._raw.tell()
        position = self._raw.seek(target)
        self.inflated += max(position - before, 0)
        return position


def _tar_members(
    path: Path, *, max_members: int = MAX_MEMBERS, max_unpacked_bytes: int = MAX_UNPACKED_BYTES
) -> list[tuple[Member, str]]:
    """Members of a tar.gz with their raw names (to read them back). Each header's size is
    counted as it is read (`_Budget`), and the stream is never inflated past what the
    members seen so far account for (`_BoundedStream`)."""
    out: list[tuple[Member, str]] = []
    budget = _Budget(max_members=max_members, max_unpacked_bytes=max_unpacked_bytes)
    try:
        with gzip.open(path, "rb") as inflated:
            stream = _BoundedStream(inflated, budget)
            with tarfile.open(fileobj=stream, mode="r:") as archive:  # type: ignore[call-overload]
                for info in archive:
                    # Before the next iteration seeks past this member's data.
                    budget.add(info.name, info.size if info.isreg() else 0)
                    out.append((_tar_member(info), info.name))
                # To the end of the gzip stream, so its CRC is checked too.
                while stream.read(CHUNK_BYTES):
                    pass
    except ArchiveError:
        raise
    except READ_ERRORS as exc:
        raise ArchiveError(f"not a readable tar.gz: {exc}") from exc
    return out


def _tar_member(info: tarfile.TarInfo) -> Member:
    name = normalise_name(info.name)
    if info.isreg():
        return Member(name, FILE, info.size, _file_mode(info.mode), "")
    if info.isdir():
        return Member(name, DIRECTORY, 0, _dir_mode(info.mode), "")
    if info.issym():
        return Member(name, SYMLINK, 0, 0o777, info.linkname)
    if info.islnk():
        target = normalise_name(info.linkname, what=f"hard link {info.name!r} to")
        return Member(name, HARDLINK, 0, 0, target)
    raise ArchiveError(
        f"member {info.name!r}: only files, directories and links are allowed "
        "(no devices, FIFOs or sockets)"
    )


def _zip_members(
    path: Path, *, max_members: int = MAX_MEMBERS, max_unpacked_bytes: int = MAX_UNPACKED_BYTES
) -> list[tuple[Member, str]]:
    """Members of a zip with their raw names. The sizes in the central directory are judged
    before any member's data is read; reading a member never inflates past its declared
    size (`zipfile` stops there and checks the CRC)."""
    out: list[tuple[Member, str]] = []
    try:
        with zipfile.ZipFile(path) as archive:
            budget = _Budget(max_members=max_members, max_unpacked_bytes=max_unpacked_bytes)
            for info in archive.infolist():
                budget.add(info.filename, info.file_size)
            for info in archive.infolist():
                name = normalise_name(info.filename)
                if info.flag_bits & 0x1:
                    raise ArchiveError(f"member {info.filename!r}: encrypted members are refused")
                mode = info.external_attr >> 16
                file_type = stat.S_IFMT(mode)
                if stat.S_ISLNK(mode):
                    if info.file_size > MAX_ZIP_LINK_BYTES:
                        raise ArchiveError(f"member {info.filename!r}: a link target too long")
                    target = archive.read(info).decode("utf-8", "surrogateescape")
                    member = Member(name, SYMLINK, 0, 0o777, target)
                elif info.is_dir() or stat.S_ISDIR(mode):
                    member = Member(name, DIRECTORY, 0, _dir_mode(mode or 0o755), "")
                elif file_type in (0, stat.S_IFREG):
                    member = Member(name, FILE, info.file_size, _file_mode(mode or 0o644), "")
                else:
                    raise ArchiveError(
                        f"member {info.filename!r}: only files, directories and links are "
                        "allowed (no devices, FIFOs or sockets)"
                    )
                out.append((member, info.filename))
            # The data too (a tar.gz is read through as its headers are): a damaged member
            # is refused now rather than when a runner unpacks it.
            damaged = archive.testzip()
            if damaged is not None:
                raise ArchiveError(f"member {damaged!r} is damaged (bad CRC)")
    except ArchiveError:
        raise
    except READ_ERRORS as exc:
        raise ArchiveError(f"not a readable zip: {exc}") from exc
    return out


def link_escapes(link_name: str, target: str, links: dict[str, str]) -> bool:
    """Whether the symlink `link_name` -> `target` resolves outside the root, following the
    archive's other `links` (name -> target) as the kernel would: `a -> .` makes `a/..`
    the root's parent, which a plain look at `l -> a/..` would miss."""
    if not target or target.startswith("/") or "\x00" in target:
        return True
    stack = link_name.split("/")[:-1]
    pending = deque(target.split("/"))
    hops = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
            continue
        stack.append(part)
        inner = links.get("/".join(stack))
        if inner is not None:
            hops += 1
            if hops > MAX_LINK_HOPS or inner.startswith("/"):
                return True
            stack.pop()
            pending.extendleft(reversed(inner.split("/")))
    return False


def _check(members: list[tuple[Member, str]], *, max_members: int, max_unpacked_bytes: int) -> None:
    if len(members) > max_members:
        raise ArchiveError(f"more than {max_members} members")
    total = sum(member.size for member, _ in members)
    if total > max_unpacked_bytes:
        raise ArchiveError(
            f"it unpacks to {total} bytes, more than the {max_unpacked_bytes} allowed"
        )
    links = {m.name: m.link for m, _ in members if m.kind == SYMLINK}
    files: set[str] = set()
    for member, raw in members:
        parts = member.name.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in links:
                raise ArchiveError(f"member {raw!r}: it lies under a link of the archive")
        if member.kind != DIRECTORY and not member.name:
            raise ArchiveError(f"member {raw!r}: the root can only be a directory")
        if member.kind != SYMLINK and member.name in links:
            raise ArchiveError(f"member {raw!r}: it has the name of a link of the archive")
        if member.kind == SYMLINK and link_escapes(member.name, member.link, links):
            raise ArchiveError(
                f"member {raw!r}: its link to {member.link!r} leads outside the archive"
            )
        if member.kind == HARDLINK and member.link not in files:
            raise ArchiveError(
                f"member {raw!r}: a hard link must name a regular file earlier in the archive"
            )
        if member.kind == FILE:
            files.add(member.name)


def _read_members(
    path: Path, fmt: str, *, max_members: int, max_unpacked_bytes: int
) -> list[tuple[Member, str]]:
    limits = {"max_members": max_members, "max_unpacked_bytes": max_unpacked_bytes}
    if fmt == FORMAT_TAR_GZ:
        return _tar_members(path, **limits)
    if fmt == FORMAT_ZIP:
        return _zip_members(path, **limits)
    raise ArchiveError("not a tar.gz or zip archive")


def check_archive(
    path: Path,
    fmt: str,
    *,
    max_members: int = MAX_MEMBERS,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> list[Member]:
    """Every member of the archive at `path`, checked against the rules; ArchiveError
    naming the first member that breaks one."""
    members = _read_members(
        path, fmt, max_members=max_members, max_unpacked_bytes=max_unpacked_bytes
    )
    _check(members, max_members=max_members, max_unpacked_bytes=max_unpacked_bytes)
    return [member for member, _ in members]


def _write_file(target: Path, source: IO[bytes], mode: int) -> None:
    if os.path.lexists(target) and not target.is_dir():
        target.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, CHUNK_BYTES)
    os.chmod(target, mode)


def _inside(root: Path, path: Path) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def _unpack(
    path: Path,
    fmt: str,
    dest: Path,
    by_raw: dict[str, Member],
    dir_modes: dict[str, int],
    target_of: Callable[[str], Path],
) -> None:
    """Write the files and directories (links come after, in `extract`)."""
    if fmt == FORMAT_TAR_GZ:
        with tarfile.open(path, mode="r:gz") as archive:
            for info in archive:
                member = by_raw[info.name]
                if member.kind == FILE:
                    source = archive.extractfile(info)
                    if source is None:
                        raise ArchiveError(f"member {info.name!r} cannot be read")
                    with source:
                        _write_file(target_of(member.name), source, member.mode)
                elif member.kind == DIRECTORY:
                    target_of(member.name).mkdir(exist_ok=True)
                    dir_modes[member.name] = member.mode
                elif member.kind == HARDLINK:
                    with open(dest / member.link, "rb") as source:
                        mode = stat.S_IMODE(os.stat(dest / member.link).st_mode)
                        _write_file(target_of(member.name), source, mode)
    else:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                member = by_raw[info.filename]
                if member.kind == FILE:
                    with archive.open(info) as source:
                        _write_file(target_of(member.name), source, member.mode)
                elif member.kind == DIRECTORY:
                    target_of(member.name).mkdir(exist_ok=True)
                    dir_modes[member.name] = member.mode


def extract(
    path: Path,
    fmt: str,
    dest: Path,
    *,
    max_members: int = MAX_MEMBERS,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> list[Member]:
    """Check the archive at `path` (every rule above), then unpack it into `dest`, which
    must be new or empty. Files and directories first, links last, so nothing is written
    through a link; hard links become copies. ArchiveError or OSError on failure (what was
    unpacked is left for the caller to remove)."""
    entries = _read_members(
        path, fmt, max_members=max_members, max_unpacked_bytes=max_unpacked_bytes
    )
    _check(entries, max_members=max_members, max_unpacked_bytes=max_unpacked_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise ArchiveError(f"{dest} is not empty")
    by_raw = {raw: member for member, raw in entries}
    dir_modes: dict[str, int] = {}

    def target_of(name: str) -> Path:
        target = dest / name if name else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    try:
        _unpack(path, fmt, dest, by_raw, dir_modes, target_of)
    except ArchiveError:
        raise
    except READ_ERRORS as exc:
        raise ArchiveError(f"unpacking failed: {exc}") from exc
    symlinks = [member for member, _ in entries if member.kind == SYMLINK]
    for member in symlinks:
        target = target_of(member.name)
        if os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                raise ArchiveError(f"member {member.name!r}: a link replaces a directory")
            target.unlink()
        os.symlink(member.link, target)
    for member in symlinks:  # a second look, at what the kernel now resolves
        if not _inside(dest, dest / member.name):
            raise ArchiveError(f"member {member.name!r}: its link leads outside the archive")
    for name, mode in sorted(dir_modes.items(), key=lambda item: -item[0].count("/")):
        os.chmod(dest / name if name else dest, mode)
    return [member for member, _ in entries]


def safe_relative(raw: str, *, what: str) -> str:
    """A relative path for a file the spec names (`container.files`): normalised, or
    ArchiveError (absolute, `..`, NUL, empty)."""
    name = normalise_name(raw, what=what)
    if not name:
        raise ArchiveError(f"{what} {raw!r}: not a file path")
    return name


__all__ = [
    "FORMATS",
    "FORMAT_TAR_GZ",
    "FORMAT_ZIP",
    "ArchiveError",
    "Member",
    "check_archive",
    "detect_format",
    "extract",
    "link_escapes",
    "normalise_name",
    "safe_relative",
]
