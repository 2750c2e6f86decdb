"""The container image the tests run jobs in, built offline from Debian's packages.

`debootstrap` makes a minimal Debian with python3 (what the runner needs in an image), a
marker file is baked in, and `podman import` stores it as TEST_IMAGE. Built once per machine
(about a minute); later sessions find it in podman's store. This machine's podman needs
runc, cgroupfs and explicit ulimits (`config/test_settings.py` sets them)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from apps.providers.backends.local import container_runtime

TEST_IMAGE = "localhost/trainyard-test:bookworm-1"
MARKER_PATH = "/etc/trainyard-test-image"
MARKER = "trainyard test image, bookworm"
MISSING = "apt-get install podman runc debootstrap (.ci/run does it)"


def _mirror() -> str:
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def ensure_test_image(scratch: Path) -> str:
    podman = container_runtime("podman")
    if not podman.installed or shutil.which("debootstrap") is None:
        raise RuntimeError(f"podman or debootstrap is not installed: {MISSING}")
    if podman.cli("image", "exists", TEST_IMAGE).returncode == 0:
        return TEST_IMAGE
    rootfs = scratch / "rootfs"
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python-is-python3",
            "bookworm",
            str(rootfs),
            _mirror(),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (rootfs / MARKER_PATH.lstrip("/")).write_text(MARKER + "\n")
    archive = scratch / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    imported = podman.cli("import", str(archive), TEST_IMAGE, timeout=300)
    assert imported.returncode == 0, imported.stderr
    shutil.rmtree(rootfs, ignore_errors=True)
    archive.unlink()
    return TEST_IMAGE


def containers_of_job(job_id: str) -> list[str]:
    """The names of every container, running or not, labelled with this job."""
    listed = container_runtime("podman").cli(
        "ps", "--all", "--filter", f"label=trainyard.job={job_id}", "--format", "{{.Names}}"
    )
    return [name for name in listed.stdout.split() if name]
