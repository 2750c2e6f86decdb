"""`runner.archive`: the rules a code archive's members follow, on both formats, and safe
unpacking (nothing written outside the destination, links out refused, no special files)."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from runner.archive import (
    ArchiveError,
    check_archive,
    detect_format,
    extract,
    link_escapes,
    normalise_name,
)


def make_tar(path: Path, entries: list[tuple]) -> Path:
    """entries: ("file", name, bytes[, mode]) | ("dir", name) | ("sym", name, target) |
    ("hard", name, target) | ("fifo", name) | ("chr", name)."""
    with tarfile.open(path, "w:gz") as archive:
        for entry in entries:
            kind, name = entry[0], entry[1]
            info = tarfile.TarInfo(name)
            data = None
            if kind == "file":
                data = entry[2]
                info.size = len(data)
                info.mode = entry[3] if len(entry) > 3 else 0o644
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, entry[2]
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, entry[2]
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def make_zip(path: Path, entries: list[tuple]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for entry in entries:
            kind, name = entry[0], entry[1]
            info = zipfile.ZipInfo(name)
            if kind == "file":
                info.external_attr = ((entry[3] if len(entry) > 3 else 0o644) | stat.S_IFREG) << 16
                archive.writestr(info, entry[2])
            elif kind == "dir":
                info.filename = name.rstrip("/") + "/"
                info.external_attr = (0o755 | stat.S_IFDIR) << 16
                archive.writestr(info, b"")
            elif kind == "sym":
                info.external_attr = (0o777 | stat.S_IFLNK) << 16
                archive.writestr(info, entry[2])
            elif kind == "chr":
                info.external_attr = (0o644 | stat.S_IFCHR) << 16
                archive.writestr(info, b"")
    return path


def _format(path: Path) -> str | None:
    with open(path, "rb") as fh:
        return detect_format(fh)


PROJECT = [
    ("dir", "pkg"),
    ("file", "pkg/__init__.py", b""),
    ("file", "pkg/train.py", b"print('hi')\n"),
    ("file", "run.sh", b"#!/bin/sh\necho run\n", 0o4777),
    ("sym", "latest", "pkg/train.py"),
    ("dir", "data"),
    ("file", "data/x.bin", b"\x00" * 1000),
]


@pytest.mark.parametrize("maker", [make_tar, make_zip])
def test_a_project_unpacks_with_its_links_and_safe_modes(tmp_path, maker):
    archive = maker(tmp_path / "a", PROJECT)
    fmt = _format(archive)
    dest = tmp_path / "out"

    members = extract(archive, fmt, dest)

    assert len(members) == len(PROJECT)
    assert (dest / "pkg" / "train.py").read_text() == "print('hi')\n"
    assert (dest / "data" / "x.bin").stat().st_size == 1000
    assert os.readlink(dest / "latest") == "pkg/train.py"
    assert (dest / "latest").read_text() == "print('hi')\n"
    # Executable bits kept; setuid and write for group and others dropped.
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755


def test_a_hard_link_becomes_a_copy_of_an_earlier_member(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("file", "a.txt", b"A"), ("hard", "b.txt", "a.txt")])
    extract(archive, "tar.gz", tmp_path / "out")
    a, b = (tmp_path / "out" / "a.txt").stat(), (tmp_path / "out" / "b.txt").stat()
    assert (tmp_path / "out" / "b.txt").read_bytes() == b"A"
    assert a.st_ino != b.st_ino


def test_formats_are_told_by_their_first_bytes(tmp_path):
    tar = make_tar(tmp_path / "x.zip", [("file", "a", b"a")])  # the name lies
    zipped = make_zip(tmp_path / "x.tgz", [("file", "a", b"a")])
    assert _format(tar) == "tar.gz"
    assert _format(zipped) == "zip"
    assert detect_format(io.BytesIO(b"plain text")) is None


BAD_MEMBERS = [
    ([("file", "/etc/passwd", b"x")], "absolute"),
    ([("file", "../escape.txt", b"x")], "'..'"),
    ([("file", "a/../../escape.txt", b"x")], "'..'"),
    ([("sym", "l", "/etc")], "leads outside"),
    ([("sym", "l", "../outside")], "leads outside"),
    ([("dir", "d"), ("sym", "d/l", "../../x")], "leads outside"),
    # `a -> .` makes `a/..` the root's parent: a look at `l`'s target alone would miss it.
    ([("sym", "a", "."), ("sym", "l", "a/..")], "leads outside"),
    ([("sym", "loop", "loop/x")], "leads outside"),
    ([("sym", "l", "sub"), ("file", "l/x", b"written through a link")], "under a link"),
    ([("file", "a", b"x"), ("sym", "a", "b")], "name of a link"),
]


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize(("entries", "why"), BAD_MEMBERS)
@pytest.mark.parametrize("maker", [make_tar, make_zip])
def test_members_that_would_escape_are_refused_and_nothing_is_written(
    tmp_path, maker, entries, why
):
    archive = maker(tmp_path / "a", entries)
    fmt = _format(archive)
    with pytest.raises(ArchiveError, match=why):
        check_archive(archive, fmt)
    with pytest.raises(ArchiveError, match=why):
        extract(archive, fmt, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # checked before anything is written
    assert not (tmp_path / "escape.txt").exists()


@pytest.mark.parametrize(
    ("maker", "entries", "why"),
    [
        (make_tar, [("fifo", "f")], "no devices"),
        (make_tar, [("chr", "dev")], "no devices"),
        (make_zip, [("chr", "dev")], "no devices"),
        (make_tar, [("file", "a", b"x"), ("hard", "h", "/etc/passwd")], "absolute"),
        (make_tar, [("hard", "h", "later"), ("file", "later", b"x")], "earlier in the archive"),
        (make_tar, [("hard", "h", "../../etc/passwd")], "'..'"),
    ],
)
def test_special_files_and_hard_links_out_are_refused(tmp_path, maker, entries, why):
    archive = maker(tmp_path / "a", entries)
    with pytest.raises(ArchiveError, match=why):
        check_archive(archive, _format(archive))


def test_limits_on_members_and_unpacked_size(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("file", f"f{i}", b"x" * 100) for i in range(5)])
    with pytest.raises(ArchiveError, match="more than 4 members"):
        check_archive(archive, "tar.gz", max_members=4)
    with pytest.raises(ArchiveError, match="unpacks to 500 bytes"):
        check_archive(archive, "tar.gz", max_unpacked_bytes=499)


def test_a_truncated_or_foreign_file_is_not_an_archive(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("file", "a", os.urandom(100_000))])
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(archive.read_bytes()[:5000])
    with pytest.raises(ArchiveError, match=r"not a readable tar\.gz"):
        check_archive(cut, "tar.gz")
    with pytest.raises(ArchiveError, match="not a readable zip"):
        check_archive(archive, "zip")


def test_extract_refuses_a_destination_that_is_not_empty(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("file", "a", b"x")])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("x")
    with pytest.raises(ArchiveError, match="not empty"):
        extract(archive, "tar.gz", tmp_path / "out")


def test_names_are_normalised():
    assert normalise_name("./a//b/./c") == "a/b/c"
    assert normalise_name("./") == ""
    for bad in ("/a", "a/../../b", "C:/x", "a\x00b"):
        with pytest.raises(ArchiveError):
            normalise_name(bad)


def test_link_resolution_follows_the_archives_other_links():
    assert not link_escapes("a/l", "../b", {})
    assert link_escapes("a/l", "../../b", {})
    assert not link_escapes("l", "d/..", {"d": "sub/inner"})  # d/.. is sub: inside
    assert link_escapes("l", "d/..", {"d": "."})


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_zip_with_damaged_data_is_refused_not_crashed_on(tmp_path, method):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        archive.writestr("data.txt", b"hello world, " * 1000)
    raw = bytearray(path.read_bytes())
    raw[45] ^= 0xFF  # inside the member's data (its local header is 38 bytes)
    path.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError, match=r"damaged|not a readable zip"):
        check_archive(path, "zip")
    with pytest.raises(ArchiveError):
        extract(path, "zip", tmp_path / "out")


def test_a_tar_gz_with_damaged_data_is_refused_not_crashed_on(tmp_path):
    path = make_tar(tmp_path / "a.tgz", [("file", "a.bin", os.urandom(50_000) + b"x" * 9000)])
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # random data is stored as it is: only the CRC tells
    path.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError, match=r"not a readable tar\.gz"):
        check_archive(path, "tar.gz")


def _tar_gz_declaring(path: Path, size: int, data: bytes = b"", tail: bytes = b"") -> Path:
    """A tar.gz whose one member's header declares `size` bytes but whose stream then holds
    only `data` (and `tail`): whatever reads past the header finds the stream cut short."""
    info = tarfile.TarInfo("big.bin")
    info.size = size
    path.write_bytes(gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT) + data + tail))
    return path


def test_a_tar_member_declaring_too_much_is_refused_at_its_header(tmp_path):
    # 3 GiB declared, 1 MiB of it present: judged by the header, the missing data is never
    # looked for (reading on would end in "unexpected end of data" instead).
    archive = _tar_gz_declaring(tmp_path / "a.tgz", 3 * 1024**3, b"\0" * 1024**2)
    for check in (
        check_archive,
        lambda path, fmt, **limits: extract(path, fmt, tmp_path / "o", **limits),
    ):
        with pytest.raises(ArchiveError) as refused:
            check(archive, "tar.gz", max_unpacked_bytes=2 * 1024**3)
        assert str(refused.value) == (
            "member 'big.bin': it unpacks to 3221225472 bytes or more, more than the "
            f"{2 * 1024**3} allowed"
        )


def test_the_running_total_refuses_the_member_that_passes_the_limit(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("file", f"f{i}", b"x" * 100) for i in range(5)])
    with pytest.raises(ArchiveError, match="member 'f3': it unpacks to 400 bytes or more"):
        check_archive(archive, "tar.gz", max_unpacked_bytes=399)


def test_gigabytes_after_the_end_of_a_tar_are_not_inflated(tmp_path):
    # A tiny member, the end-of-archive blocks, then 8 MiB of zeros in the same gzip stream
    # (kilobytes compressed): reading the stream "to its end" would inflate all of it.
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    archive = tmp_path / "tail.tgz"
    archive.write_bytes(gzip.compress(plain.getvalue() + b"\0" * (8 * 1024**2)))
    with pytest.raises(ArchiveError, match="longer than its members account for"):
        check_archive(archive, "tar.gz", max_unpacked_bytes=1024**2)


def test_a_zip_is_judged_by_its_central_directory_before_any_data_is_read(tmp_path):
    path = make_zip(tmp_path / "a.zip", [("file", "big.bin", b"x" * 1000)])
    raw = bytearray(path.read_bytes())
    # Declare 3 GiB in both headers; the 1000 stored bytes stay, so reading the data would
    # end in a damaged (short) member rather than in the size rule.
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = raw.index(signature)
        raw[start + at : start + at + 4] = (3 * 1024**3).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError, match=r"member 'big\.bin': it unpacks to 3221225472 bytes"):
        check_archive(path, "zip", max_unpacked_bytes=2 * 1024**3)
    many = make_zip(tmp_path / "many.zip", [("file", f"f{i}", b"") for i in range(5)])
    with pytest.raises(ArchiveError, match="more than 4 members"):
        check_archive(many, "zip", max_members=4)
