"""Packing --workdir: what goes into the archive and what stays out."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from trainyard_cli.pack import pack_directory


def _tree(root: Path) -> Path:
    files = {
        "train.py": "print('hi')\n",
        "data/input.txt": "some text\n",
        "data/big.ckpt": "ignored by pattern\n",
        "logs/run.log": "ignored directory\n",
        "notes.md": "kept\n",
        "models/.gitignore": "*.bin\n!keep.bin\n",
        "models/keep.bin": "kept by negation\n",
        "models/drop.bin": "ignored by the nested file\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        ".gitignore": "# build outputs\n*.ckpt\nlogs/\n__pycache__/\n",
        "pkg/__pycache__/mod.pyc": "bytecode\n",
        "pkg/mod.py": "x = 1\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("train.py", root / "inside-link")
    os.symlink("/etc/passwd", root / "outside-link")
    return root


def _pack(root: Path):
    buffer = io.BytesIO()
    packed = pack_directory(root, buffer)
    return packed, buffer.getvalue()


def test_the_archive_holds_what_git_would_commit(tmp_path):
    packed, data = _pack(_tree(tmp_path / "project"))

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        contents = {m.name: tar.extractfile(m).read() for m in members.values() if m.isfile()}
    assert sorted(contents) == [
        ".gitignore",
        "data/input.txt",
        "models/.gitignore",
        "models/keep.bin",
        "notes.md",
        "pkg/mod.py",
        "run.sh",
        "train.py",
    ]
    assert contents["train.py"] == b"print('hi')\n"
    assert members["run.sh"].mode & 0o111  # the executable bit survives
    assert members["inside-link"].issym() and members["inside-link"].linkname == "train.py"
    assert "outside-link" not in members
    assert packed.unsafe_links == ["outside-link"]
    assert {m.uid for m in members.values()} == {0}
    assert not any(name.startswith(("/", "..")) for name in members)
    assert set(packed.skipped) == {
        ".git",
        "data/big.ckpt",
        "logs",
        "models/drop.bin",
        "pkg/__pycache__",
    }


def test_packing_the_same_tree_twice_gives_the_same_bytes(tmp_path):
    root = _tree(tmp_path / "project")
    assert _pack(root)[1] == _pack(root)[1]


def test_a_tree_without_a_gitignore_still_leaves_out_dot_git(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "a.py").write_text("a")
    packed, _ = _pack(tmp_path)
    assert packed.files == ["a.py"]
    assert packed.skipped == [".git"]
