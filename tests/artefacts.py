"""Expensive test artefacts (the tiny model, the demo data, the tiny adapters) built once per
machine and shared by every pytest-xdist worker, every later run and every clone.

Each lives in `<cache>/<name>-<digest>/`, where the digest covers the sources that build it
and the versions of the libraries that write it: a change to any of them builds a fresh one,
so a clone never gets another version's. The cache is `TRAINYARD_TEST_CACHE`, by default
/var/tmp/trainyard-test-cache: outside the checkout, so a fresh clone finds them built (as it
finds the podman images), and readable by every user (workloads may run as `nobody`).

A file lock makes the first worker build while the others wait; a `done.json` written last
marks a finished build, so one killed halfway is built again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from filelock import FileLock

from tests.live import ROOT

CACHE = Path(os.environ.get("TRAINYARD_TEST_CACHE") or "/var/tmp/trainyard-test-cache")
LIBRARIES = ("torch", "transformers", "peft", "tokenizers", "safetensors")


def source_digest(*sources: str) -> str:
    """A digest of the files under `sources` (paths relative to the repository) and of the
    installed versions of the libraries that write the artefacts."""
    digest = hashlib.sha256()
    for source in sources:
        path = ROOT / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    for library in LIBRARIES:
        try:
            digest.update(f"{library}={metadata.version(library)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{library}=absent".encode())
    return digest.hexdigest()[:16]


def cached(name: str, sources: tuple[str, ...], build: Callable[[Path], object]) -> object:
    """`build(directory)`'s result, built once into the cache for this digest of `sources`.
    The result must be JSON: paths as strings under `directory` (they are returned as
    they were, as the directory stays put)."""
    root = CACHE / f"{name}-{source_digest(*sources, 'tests/artefacts.py')}"
    done = root / "done.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{root}.lock", timeout=900):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            result = build(root)
            done.write_text(json.dumps(result))
    return json.loads(done.read_text())
