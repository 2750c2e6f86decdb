"""The images Trainyard's own workloads run in, and the offline builder that makes them.

A fine-tune runs `python -m trainer` and a serve job `python -m engine` inside a container
(on podman or docker hosts). Both need python3, torch, transformers and peft, and the
project's `trainer/`, `engine/` and `runner/` packages: one image holds it all and is
tagged twice, `localhost/trainyard-trainer:<version>` and `localhost/trainyard-engine:
<version>`, the version being the installed `trainyard` package's, so a control plane never
runs workloads of another release's image (TRAINER_IMAGE and ENGINE_IMAGE name others).

Two ways to get it:
- `docker/workload.Dockerfile`, for GPU hosts and registries: torch's CUDA build and the
  `train` extra from PyPI (docs/finetunes.md, "Images": build, push to the operator's registry, then
  set TRAINER_IMAGE and ENGINE_IMAGE).
- `build_workload_image` (`manage.py build_images`; `make run` calls it when jobs run in
  containers and the image is missing or stale): no registry, no network beyond a Debian
  mirror. In two layers: the base, `debootstrap` of a minimal Debian bookworm with python3
  from Debian's packages plus the Python packages the `train` extra needs (and what they
  need in turn) copied from this installation's own environment — the same pinned versions
  the control plane was tested with; Debian's python3 is 3.11 like the project's, so
  compiled wheels load — stored by `podman import` (or docker's) under a tag of those
  packages' versions; then the project's packages on top (`build` of a COPY-only file, a
  few seconds). The base, about 1.5 GB of a CPU torch, takes minutes and is built once per
  set of package versions; a checkout whose trainer changed rebuilds only the top layer.
  The image carries the digest of what it was built from (label `trainyard.digest`), so a
  stale one is found and rebuilt. Both layers carry their modules' bytecode, compiled here
  for the image's Python 3.11 (pip would have compiled them; copying leaves it behind):
  without it every fine-tune and engine compiled torch, transformers and peft again on
  start, about 8 CPU-seconds more each time.
"""

from __future__ import annotations

import compileall
import fcntl
import hashlib
import importlib.metadata as metadata
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from packaging.markers import default_environment
from packaging.requirements import Requirement

TRAINER = "trainyard-trainer"
ENGINE = "trainyard-engine"
PROJECT_PACKAGES = ("runner", "trainer", "engine")
EXTRA = "train"
SUITE = "bookworm"
PYTHON_DIR = "usr/local/lib/python3.11/dist-packages"  # on Debian python3.11's sys.path
MARKER_PATH = "etc/trainyard-image"
# How the base is made, in its tag: a change here makes every host build it again.
# 2: the packages' bytecode compiled in.
BASE_LAYOUT = 2
DEBOOTSTRAP_TIMEOUT_S = 1200
IMPORT_TIMEOUT_S = 1200


class ImageBuildError(Exception):
    """The builder could not make the image; the message says what to fix."""


def version_tag() -> str:
    """The tag of this release's workload images: the `trainyard` package's version, made a
    valid image tag."""
    try:
        version = metadata.version("trainyard")
    except metadata.PackageNotFoundError:
        version = "dev"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", version)[:128]


def builder_images() -> tuple[str, str]:
    """The two names the offline builder tags its image with (`localhost/`: podman and
    docker both read that as an image of the local store, never as one to pull)."""
    return f"localhost/{TRAINER}:{version_tag()}", f"localhost/{ENGINE}:{version_tag()}"


def trainer_image() -> str:
    """The image a fine-tune runs in: TRAINER_IMAGE, else this release's builder image."""
    return getattr(settings, "TRAINER_IMAGE", "") or builder_images()[0]


def engine_image() -> str:
    """The image a serve job runs in: ENGINE_IMAGE, else this release's builder image."""
    return getattr(settings, "ENGINE_IMAGE", "") or builder_images()[1]


# -- which Python packages -------------------------------------------------------------------


def _distribution(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def workload_distributions() -> list[metadata.Distribution]:
    """The installed distributions the `train` extra needs, with everything they need in
    turn (markers judged for this interpreter); ImageBuildError names one that is missing."""
    root = _distribution("trainyard")
    if root is None:
        raise ImageBuildError("trainyard is not installed: run `make install` first.")
    environment = default_environment()
    wanted = [
        Requirement(text)
        for text in root.requires or []
        if Requirement(text).marker is not None
        and Requirement(text).marker.evaluate({**environment, "extra": EXTRA})
    ]
    wanted.append(Requirement("huggingface_hub"))  # the hub client (transformers needs it too)
    found: dict[str, metadata.Distribution] = {}
    while wanted:
        requirement = wanted.pop()
        key = _normal(requirement.name)
        if key in found:
            continue
        dist = _distribution(requirement.name)
        if dist is None:
            raise ImageBuildError(
                f"{requirement.name}, which the workload image needs, is not installed here: "
                "run `make install` (it installs the `train` extra)."
            )
        found[key] = dist
        extras = ["", *requirement.extras]
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(
                needed.marker.evaluate({**environment, "extra": extra}) for extra in extras
            ):
                wanted.append(needed)
    return sorted(found.values(), key=lambda dist: _normal(dist.metadata["Name"]))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _copy_distribution(dist: metadata.Distribution, target: Path) -> int:
    """Copy the distribution's installed files (not its console scripts) under `target`;
    bytes copied."""
    copied = 0
    for file in dist.files or []:
        if str(file).startswith("..") or "__pycache__" in file.parts:
            continue
        source = Path(dist.locate_file(file))
        if not source.is_file():
            continue
        destination = target / file
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
        copied += source.stat().st_size
    return copied


# -- the build -------------------------------------------------------------------------------


def debian_mirror() -> str:
    """The Debian mirror this host's apt uses (deb.debian.org when none is configured)."""
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    sources = Path("/etc/apt/sources.list")
    if sources.exists():
        for line in sources.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                return parts[1]
    return "http://deb.debian.org/debian"


DIGEST_LABEL = "trainyard.digest"
BASE = "localhost/trainyard-workload-base"


def packages_digest(distributions: list[metadata.Distribution]) -> str:
    """The copied distributions, by name and version, and how the base is made
    (BASE_LAYOUT), as one sha256 (the base image's tag)."""
    listed = f"layout {BASE_LAYOUT}\n" + "".join(
        f"{dist.metadata['Name']}=={dist.version}\n" for dist in distributions
    )
    return hashlib.sha256(listed.encode()).hexdigest()


def source_digest(distributions: list[metadata.Distribution] | None = None) -> str:
    """What the image is made of, as one sha256: the copied distributions and the project's
    workload packages' sources. A checkout whose trainer changed within one version gets a
    new image (a quick one: only the project's layer is rebuilt)."""
    digest = hashlib.sha256()
    dists = distributions if distributions is not None else workload_distributions()
    digest.update(packages_digest(dists).encode())
    base = Path(settings.BASE_DIR)
    for package in PROJECT_PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            digest.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def image_is_current(runtime, image: str) -> bool:
    """Whether `image` is in the runtime's store and was built from what is here now."""
    return _label(runtime, image) == source_digest()


def _label(runtime, image: str) -> str | None:
    labels = runtime.cli(
        "image", "inspect", "--format", f'{{{{ index .Config.Labels "{DIGEST_LABEL}" }}}}', image
    )
    return labels.stdout.strip() if labels.returncode == 0 else None


LOCK_PATH = Path(tempfile.gettempdir()) / "trainyard-workload-image.lock"


def ensure_workload_image(
    runtime,
    *,
    say: Callable[[str], None] = print,
    scratch: Path | None = None,
    force: bool = False,
) -> tuple[str, str, bool]:
    """The workload image, built when it is missing or stale (or `force`): (trainer,
    engine, built).
    One build at a time on a host (a lock file), so `make run` and a second process asking
    at once wait for one build instead of making two."""
    trainer, engine = builder_images()
    LOCK_PATH.touch(exist_ok=True)
    with open(LOCK_PATH, "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = image_is_current(runtime, trainer) and image_is_current(runtime, engine)
            if current and not force:
                return trainer, engine, False
            build_workload_image(runtime, say=say, scratch=scratch)
            return trainer, engine, True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_workload_image(
    runtime, *, say: Callable[[str], None] = print, scratch: Path | None = None
) -> tuple[str, str]:
    """Build the workload image into `runtime`'s store (see the module's docstring) and tag
    it with both names; those names. The base (Debian and the Python packages, the slow
    part) is built only when no base of the same packages is there. Raises
    ImageBuildError."""
    distributions = workload_distributions()
    base = f"{BASE}:{packages_digest(distributions)[:16]}"
    with tempfile.TemporaryDirectory(dir=scratch, prefix="trainyard-image-") as folder:
        if _label(runtime, base) is None:
            _build_base(runtime, base, distributions, Path(folder), say)
        else:
            say(f"[1/2] the base {base} is in the store already")
        trainer, engine = builder_images()
        say(f"[2/2] the project's packages on top, as {trainer} and {engine}…")
        context = Path(folder) / "context"
        for package in PROJECT_PACKAGES:
            shutil.copytree(
                Path(settings.BASE_DIR) / package,
                context / package,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            compile_bytecode(context / package, f"/{PYTHON_DIR}/{package}")
        containerfile = context / "Containerfile"
        containerfile.write_text(
            f"FROM {base}\n"
            + "".join(f"COPY {package} /{PYTHON_DIR}/{package}\n" for package in PROJECT_PACKAGES)
            + f"LABEL {DIGEST_LABEL}={source_digest(distributions)}\n"
        )
        built = runtime.cli(
            "build",
            "--pull=never" if runtime.binary == "podman" else "--pull=false",
            "--file",
            str(containerfile),
            "--tag",
            trainer,
            "--tag",
            engine,
            str(context),
            timeout=IMPORT_TIMEOUT_S,
        )
        if built.returncode != 0:
            raise ImageBuildError(f"{runtime.binary} build failed: {_tail(built)}")
    return trainer, engine


def _build_base(
    runtime,
    base: str,
    distributions: list[metadata.Distribution],
    folder: Path,
    say: Callable[[str], None],
) -> None:
    if sys.version_info[:2] != (3, 11):
        raise ImageBuildError(
            "The offline builder copies this environment's packages into Debian bookworm's "
            f"Python 3.11; this environment is Python {sys.version_info[0]}.{sys.version_info[1]}."
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: apt-get install debootstrap.")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root: run the builder as root (or sudo).")
    rootfs = folder / "rootfs"
    say(f"[1/2] the base: Debian {SUITE} with python3 (debootstrap from {debian_mirror()})…")
    made = subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python-is-python3,ca-certificates",
            SUITE,
            str(rootfs),
            debian_mirror(),
        ],
        capture_output=True,
        text=True,
        timeout=DEBOOTSTRAP_TIMEOUT_S,
    )
    if made.returncode != 0:
        raise ImageBuildError(f"debootstrap failed: {_tail(made)}")
    say(f"      {len(distributions)} Python packages from this environment…")
    total = sum(_copy_distribution(dist, rootfs / PYTHON_DIR) for dist in distributions)
    say("      compiling their bytecode…")
    compile_bytecode(rootfs / PYTHON_DIR, f"/{PYTHON_DIR}")
    (rootfs / MARKER_PATH).write_text(f"trainyard workload image {version_tag()}\n")
    say(f"      packing and importing {total / 1e9:.2f} GB of packages…")
    archive = folder / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    shutil.rmtree(rootfs, ignore_errors=True)
    imported = runtime.cli(
        "import",
        "--change",
        "ENV PYTHONUNBUFFERED=1",
        "--change",
        f"LABEL {DIGEST_LABEL}={packages_digest(distributions)}",
        str(archive),
        base,
        timeout=IMPORT_TIMEOUT_S,
    )
    archive.unlink(missing_ok=True)
    if imported.returncode != 0:
        raise ImageBuildError(f"{runtime.binary} import failed: {_tail(imported)}")


def compile_bytecode(folder: Path, path_in_image: str) -> None:
    """Every module under `folder` compiled for Python 3.11 (this interpreter; Debian
    bookworm's python3 reads the same bytecode), named `path_in_image` in tracebacks.
    Checked by nothing but its own hash: an image's sources never change under it, and a
    copy or a COPY need not keep their times. A file that does not compile (a package's
    Python 2 example) is left to the source."""
    compileall.compile_dir(
        str(folder),
        ddir=path_in_image,
        quiet=2,
        workers=0,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )


def _tail(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    return " / ".join(lines[-3:]) or f"exit status {result.returncode}"
