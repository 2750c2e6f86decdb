"""A container runtime (podman or docker) driven through its command line, for backends
that run each attempt in the job's image.

One container per attempt, named after it (`container_name`), so a repeated launch finds
the container it started before instead of starting another. The runner is bind-mounted
read-only and runs as the container's entrypoint (`python3 -m runner`); the attempt's work
directory is the only host directory the container may write, beside which it sees only its
control socket's directory (read-only). Every container has a network of its own (NETWORKS:
never the host's), so nothing on the host's loopback (the control plane, its Redis and
PostgreSQL) is reachable from it; its one published port goes to the host's loopback only.
The container's environment is only what `run` is given: podman and docker start it from
the image's own, never from ours. Values are passed by name (`--env NAME`, the value read
from the CLI's own environment), so the runner token never appears in an argv that `ps`
shows. `states` reads many containers' states with one `container inspect` (the local
backend's `poll_many`).

Images are registry references only (`image_reference_problem`, also what the API checks
at submit): a transport such as `docker-archive:/path` or `dir:/path` would have the runtime
open a path of this host. Nothing here touches the database. Errors: `ImageRefused` (not a
registry reference: permanent), `ImageUnavailable` (the image is neither in the
local store nor pullable: permanent), `LaunchRefused` (the runtime will not start the
container, e.g. its OCI runtime's error: permanent), `ContainerError` (the CLI failed
otherwise: retried). A `run` that fails never leaves its container behind.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from apps.providers.backends.base import PermanentBackendError, RetryableBackendError

RUNNER_MOUNT = "/opt/trainyard"  # the runner package is mounted at RUNNER_MOUNT/runner
WORKDIR_MOUNT = "/work"
CLI_TIMEOUT_S = 60.0
# `states`: this many containers per `container inspect`, and what it prints of each.
INSPECT_BATCH = 500
INSPECT_MANY_FORMAT = "{{json .Name}}\t{{json .State}}"
NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
# An image found in the local store is not looked for again for this long (one `image
# inspect` fewer per launch). A run that fails forgets it and looks: an image removed
# meanwhile is reported unavailable (ImageUnavailable), as `ensure_image` would have.
IMAGE_SEEN_TTL_S = 60.0
# (binary, global args, image) -> when `image inspect` last found it.
_images_seen: dict[tuple[str, tuple[str, ...], str], float] = {}
# What a provider's config `network` may say. `isolated`: a network of the attempt's own with
# a way out to the internet and none to the host's services (podman: slirp4netns, whose
# guest cannot reach the host's loopback; docker: its default bridge, which reaches only
# what the host publishes on its bridge address, never 127.0.0.1). `none`: no network at
# all but loopback (an offline provider). The host's own network is never one: a workload
# on it reaches the control plane's Redis and PostgreSQL.
NETWORKS = ("isolated", "none")

# An image is a registry reference, `[host[:port]/]path[:tag][@digest]`, in the grammar of
# github.com/distribution/reference (what docker and podman parse as one).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
IMAGE_NAME_MAX = 255  # the grammar's limit on the name (host and path)
# containers/image's transports: podman reads `<transport>:<rest>` as one of them, even where
# the text also parses as `name:tag` (`oci:foo`, `dir:5000/x`). `docker:<tag>` is Docker Hub's
# `docker` image (podman reads it so too); `docker://…` fails the grammar.
IMAGE_TRANSPORTS = frozenset(
    {
        "atomic",
        "containers-storage",
        "dir",
        "docker-archive",
        "docker-daemon",
        "oci",
        "oci-archive",
        "ostree",
        "sif",
        "tarball",
    }
)
_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{64}")
IMAGE_REFERENCE_HELP = (
    "Give a registry reference, name[:tag][@digest] with an optional registry host[:port]/ "
    "(python:3.11-slim, ghcr.io/org/image:1.0); transports (docker-archive:, oci:, dir:, …), "
    "paths and image ids are not accepted."
)


def image_reference_problem(image: str) -> str | None:
    """Why `image` is not a registry reference we run, or None when it is. The API checks
    it at submit and the container backend again before any runtime call, so a row that
    bypassed the API never has the runtime open a path of this host."""
    if not isinstance(image, str) or not image:
        return IMAGE_REFERENCE_HELP
    transport, colon, _ = image.partition(":")
    if colon and transport.lower() in IMAGE_TRANSPORTS:
        return IMAGE_REFERENCE_HELP
    if _IMAGE_ID.fullmatch(image.lower()):
        return IMAGE_REFERENCE_HELP
    found = IMAGE_REFERENCE.fullmatch(image)
    if found is None or len(found.group("name")) > IMAGE_NAME_MAX:
        return IMAGE_REFERENCE_HELP
    return None


class ContainerError(RetryableBackendError):
    """The runtime's command line failed; the same call may work later."""


class ImageRefused(PermanentBackendError):
    """The job's image is not a registry reference (`image_reference_problem`): nothing is
    asked of the runtime."""

    reason = "spec_invalid"

    def __init__(self, image: str, problem: str) -> None:
        super().__init__(f"The image {image!r} is refused. {problem}")
        self.image = image


def check_image_reference(image: str) -> None:
    """ImageRefused unless `image` is a registry reference."""
    if problem := image_reference_problem(image):
        raise ImageRefused(image, problem)


class ImageUnavailable(PermanentBackendError):
    """The job's image is not in the local store and could not be pulled."""

    reason = "image_pull_failed"

    def __init__(self, image: str, detail: str) -> None:
        super().__init__(f"The image {image!r} could not be pulled: {detail}")
        self.image = image


class LaunchRefused(PermanentBackendError):
    """The runtime refused to start the container for a reason that will not heal (its OCI
    runtime's error, a flag it does not take): the attempt fails `launch_failed` at once,
    with the runtime's words."""

    def __init__(self, binary: str, detail: str) -> None:
        super().__init__(f"{binary} could not start the container: {detail}")


# Exit codes of `podman run` / `docker run` when the container's process never started:
# 125 the runtime's own error (a bad flag, a refused option), 126 the OCI runtime could not
# start it (`error setting rlimit`, a denied device), 127 its command was not found.
REFUSED_EXIT_CODES = frozenset({125, 126, 127})
# 125 also covers what may heal (a locked store, a busy name): those retry.
TRANSIENT_MARKERS = ("timeout", "timed out", "locked", "in use", "temporarily", "try again")


def refused(returncode: int, message: str) -> bool:
    """Whether a failed `run` is the runtime refusing for good (LaunchRefused) rather than a
    hiccup worth another try."""
    if returncode not in REFUSED_EXIT_CODES:
        return False
    lowered = message.lower()
    return returncode != 125 or not any(marker in lowered for marker in TRANSIENT_MARKERS)


def container_name(job_id: str, attempt: int) -> str:
    return NAME_UNSAFE.sub("-", f"trainyard-{job_id}-attempt-{attempt}")


RUNNING_STATES = frozenset({"running", "paused", "restarting"})
NEVER_STARTED_STATES = frozenset({"created", "configured"})


@dataclass(frozen=True)
class ContainerState:
    status: str  # created, running, exited, ... as the runtime says; "missing" when gone
    exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self.status in RUNNING_STATES

    @property
    def never_started(self) -> bool:
        """Created but never started: a `run` that failed (or was cut off) before the
        container's process ran. Never a launched attempt."""
        return self.status in NEVER_STARTED_STATES


@dataclass(frozen=True)
class RunSpec:
    """What one attempt's container is made of."""

    name: str
    image: str
    workdir: str  # on the host; mounted at WORKDIR_MOUNT
    runner_dir: str  # the host's `runner` package; mounted read-only
    env: dict[str, str]  # passed by name: the values never enter argv
    # The host's GPU indices the attempt was given (LaunchRequest.gpu_devices): the only
    # GPUs the container gets.
    gpu_devices: tuple[int, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    network: str = "isolated"  # see NETWORKS
    # Host directories mounted read-only: {host path: path in the container}.
    read_only: dict[str, str] = field(default_factory=dict)
    # Host directories mounted read-write besides the work directory (the hub cache).
    read_write: dict[str, str] = field(default_factory=dict)
    # Ports published to the host's loopback only: (host port, container port).
    published: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ContainerRuntime:
    """`binary` is "podman" or "docker". `global_args` go before the subcommand (podman's
    `--runtime runc --cgroup-manager=cgroupfs`), `run_args` after `run` (`--ulimit ...`):
    what a host needs that the runtime's defaults lack."""

    binary: str
    global_args: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()

    @property
    def installed(self) -> bool:
        return shutil.which(self.binary) is not None

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT_S):
        try:
            return subprocess.run(
                [self.binary, *self.global_args, *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise PermanentBackendError(f"{self.binary} is not installed on this host") from exc
        except subprocess.TimeoutExpired as exc:
            raise ContainerError(f"{self.binary} {args[0]} took over {timeout:.0f}s") from exc

    def run_argv(self, spec: RunSpec) -> list[str]:
        """The argv of `run` for `spec` (tests read it; GPUs appear here). ImageRefused
        for an image that is not a registry reference."""
        check_image_reference(spec.image)
        argv = [
            self.binary,
            *self.global_args,
            "run",
            "--detach",
            "--name",
            spec.name,
            *self.network_args(spec.network),
            "--workdir",
            WORKDIR_MOUNT,
            "--volume",
            f"{spec.workdir}:{WORKDIR_MOUNT}:rw",
            "--volume",
            f"{spec.runner_dir}:{RUNNER_MOUNT}/runner:ro",
            "--entrypoint",
            "python3",
            *self.run_args,
        ]
        for host_path, mounted in sorted(spec.read_only.items()):
            argv += ["--volume", f"{host_path}:{mounted}:ro"]
        for host_path, mounted in sorted(spec.read_write.items()):
            argv += ["--volume", f"{host_path}:{mounted}:rw"]
        for host_port, port in spec.published:
            argv += ["--publish", f"127.0.0.1:{int(host_port)}:{int(port)}"]
        for key, value in sorted(spec.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for name in sorted(spec.env):
            argv += ["--env", name]
        argv += self.gpu_args(spec.gpu_devices)
        argv += [spec.image, "-m", "runner"]
        return argv

    def network_args(self, network: str) -> list[str]:
        """The `run` flags of a provider's `network` (NETWORKS); PermanentBackendError for
        any other, the host's own network included."""
        if network == "none":
            return ["--network=none"]
        if network == "isolated":
            return ["--network=bridge"] if self.binary == "docker" else ["--network=slirp4netns"]
        raise PermanentBackendError(
            f"Unknown container network {network!r}: one of {', '.join(NETWORKS)} "
            "(a workload never shares the host's network)"
        )

    def gpu_args(self, devices: Sequence[int]) -> list[str]:
        """The attempt's own NVIDIA GPUs, by their host indices, and no other: one CDI
        device per index for podman (`nvidia.com/gpu=<i>`, from the spec the NVIDIA
        Container Toolkit's `nvidia-ctk cdi generate` makes), `--gpus "device=<i>,<j>"` for
        docker (quoted: docker reads the value as CSV). None without devices: a GPU attempt
        that was given none (one placed before devices were assigned) gets no GPU rather
        than every GPU. Inside, the container numbers its GPUs from 0."""
        indices = [str(int(index)) for index in devices]
        if not indices:
            return []
        if self.binary == "docker":
            return ["--gpus", f'"device={",".join(indices)}"']
        return [arg for index in indices for arg in ("--device", f"nvidia.com/gpu={index}")]

    def ensure_image(self, image: str, *, pull_timeout_s: float) -> None:
        """The image is in the local store, or pulled now; ImageUnavailable if neither,
        ImageRefused (before any runtime call) if it is not a registry reference."""
        check_image_reference(image)
        key = (self.binary, self.global_args, image)
        if time.monotonic() - _images_seen.get(key, -IMAGE_SEEN_TTL_S) < IMAGE_SEEN_TTL_S:
            return
        if self.cli("image", "inspect", image).returncode == 0:
            _images_seen[key] = time.monotonic()
            return
        try:
            pulled = self.cli("pull", "--quiet", image, timeout=pull_timeout_s)
        except ContainerError as exc:
            raise ImageUnavailable(image, str(exc)) from exc
        if pulled.returncode != 0:
            raise ImageUnavailable(image, _last_line(pulled.stderr) or "the pull failed")

    def run(self, spec: RunSpec, *, host_env: dict[str, str]) -> None:
        """Start the container (detached). Raises ContainerError when it exists already
        (`exists` tells) or the runtime refuses."""
        result = subprocess.run(
            self.run_argv(spec),
            capture_output=True,
            text=True,
            env={**host_env, **spec.env},
            timeout=CLI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            seen = _images_seen.pop((self.binary, self.global_args, spec.image), None)
            # `run` can leave the container created but never started: gone, so that no
            # later launch adopts it as running.
            self.remove(spec.name)
            message = _last_line(result.stderr) or f"{self.binary} run failed"
            if seen is not None and self.cli("image", "inspect", spec.image).returncode != 0:
                raise ImageUnavailable(spec.image, message)  # it left the store since
            if refused(result.returncode, message):
                raise LaunchRefused(self.binary, message)
            raise ContainerError(message)

    def state(self, name: str) -> ContainerState:
        result = self.cli("container", "inspect", "--format", "{{json .State}}", name)
        if result.returncode != 0:
            return ContainerState("missing")
        try:
            state = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise ContainerError(f"unreadable state of {name}: {result.stdout!r}") from exc
        return _state_of(state)

    def states(self, names: Sequence[str]) -> dict[str, ContainerState]:
        """`state` of each of `names`, with one `container inspect` for all of them (per
        INSPECT_BATCH names). Both runtimes print the containers they found and name the
        missing ones on stderr ("no such container/object"); when the runtime fails
        otherwise, each container is asked alone, so the answer is always `state`'s."""
        found: dict[str, ContainerState] = {}
        for start in range(0, len(names), INSPECT_BATCH):
            chunk = list(dict.fromkeys(names[start : start + INSPECT_BATCH]))
            found.update(self._inspect_many(chunk))
        return found

    def _inspect_many(self, names: list[str]) -> dict[str, ContainerState]:
        if not names:
            return {}
        result = self.cli("container", "inspect", "--format", INSPECT_MANY_FORMAT, *names)
        found: dict[str, ContainerState] = {}
        try:
            for line in result.stdout.splitlines():
                if line.strip():
                    name_json, _, state_json = line.partition("\t")
                    name = str(json.loads(name_json)).lstrip("/")  # docker's name is /name
                    found[name] = _state_of(json.loads(state_json))
        except (ValueError, AttributeError):
            found = {}
            unexplained = True
        else:
            errors = [line for line in result.stderr.splitlines() if line.strip()]
            unexplained = result.returncode != 0 and not all(
                "no such" in line.lower() for line in errors
            )
        if unexplained or not set(found) <= set(names):
            return {name: self.state(name) for name in names}  # one at a time, as `state`
        return {name: found.get(name, ContainerState("missing")) for name in names}

    def stop_detached(self, name: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after `grace_s`, without waiting (no task waits a grace)."""
        subprocess.Popen(
            [self.binary, *self.global_args, "stop", "--time", str(max(0, round(grace_s))), name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def kill(self, name: str) -> None:
        self.cli("kill", "--signal", "KILL", name)

    def remove(self, name: str) -> None:
        """Remove the container, running or not, at once (SIGKILL: what is released is
        over; podman's `rm --force` would first wait out the container's stop timeout, ten
        seconds of a task); nothing if it is gone."""
        at_once = ("--time", "0") if self.binary == "podman" else ()  # docker's rm -f kills
        self.cli("rm", "--force", *at_once, name)

    def works(self) -> bool:
        """Whether the runtime answers at all (`info`)."""
        try:
            return self.installed and self.cli("info", timeout=20).returncode == 0
        except (ContainerError, PermanentBackendError):
            return False


def _state_of(state: dict) -> ContainerState:
    """A ContainerState from the runtime's `.State` object."""
    status = str(state.get("Status", "")).lower()
    running = status in RUNNING_STATES or status in NEVER_STARTED_STATES
    exit_code = None if running else state.get("ExitCode")
    return ContainerState(status, exit_code if isinstance(exit_code, int) else None)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
