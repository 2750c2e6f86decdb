"""Can this host's container runtime start a container at all? A tiny run, before a stack
serves, so that no stack whose container jobs would all fail (or hang) ever starts.

The probe image is an empty root filesystem imported into the local store
(PROBE_IMAGE; no registry, so it works offline), and the probe runs a command that is not in
it, on the network a job gets. A runtime that works answers "not found" (exit 127: the OCI
runtime set the container up and tried to exec); a broken one answers with its own error
first (on hosts like the development machines: `error setting rlimit type 7`, exit 126).

When the flags the runtime was given fail, the flag sets known to fix hosts like these are
tried (KNOWN_FLAG_SETS); the first that passes is what the stack should use.
"""

from __future__ import annotations

import io
import secrets
import shlex
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass

from apps.providers.backends.base import BackendError
from apps.providers.backends.containers import ContainerRuntime

PROBE_IMAGE = "localhost/trainyard-probe:empty"
MISSING_COMMAND = "/trainyard-probe-not-here"
PROBE_TIMEOUT_S = 60.0
# (CONTAINER_GLOBAL_ARGS, CONTAINER_RUN_ARGS) that make podman work on hosts with hybrid
# cgroups and a low hard nproc/nofile limit; the global flags are podman's only.
KNOWN_FLAG_SETS: tuple[tuple[str, str], ...] = (
    (
        "--runtime runc --cgroup-manager=cgroupfs",
        "--ulimit nofile=1024:4096 --ulimit nproc=1000:1000",
    ),
    ("", "--ulimit nofile=1024:4096 --ulimit nproc=1000:1000"),
    ("--runtime runc --cgroup-manager=cgroupfs", ""),
)
NOT_FOUND_MARKERS = ("not found", "no such file or directory")


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    global_args: str  # the flags that passed (or, when none did, the ones given)
    run_args: str
    detail: str = ""  # the runtime's words when the given flags failed

    def changed(self, global_args: str, run_args: str) -> bool:
        return (self.global_args, self.run_args) != (global_args, run_args)


def _runtime(binary: str, global_args: str, run_args: str) -> ContainerRuntime:
    return ContainerRuntime(
        binary, global_args=tuple(shlex.split(global_args)), run_args=tuple(shlex.split(run_args))
    )


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    return buffer.getvalue()


def _ensure_probe_image(runtime: ContainerRuntime) -> str:
    """ "" when the probe image is in the local store (imported now if need be), else why not."""
    if runtime.cli("image", "inspect", PROBE_IMAGE).returncode == 0:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".tar") as tar:
        tar.write(_empty_tar())
        tar.flush()
        imported = runtime.cli("import", tar.name, PROBE_IMAGE)
    if imported.returncode != 0:
        return _last_line(imported.stderr) or f"{runtime.binary} import failed"
    return ""


def try_run(runtime: ContainerRuntime) -> tuple[bool, str]:
    """(whether a container starts, the runtime's words when it does not)."""
    try:
        problem = _ensure_probe_image(runtime)
        if problem:
            return False, problem
        name = f"trainyard-probe-{secrets.token_hex(4)}"
        try:
            result = runtime.cli(
                "run",
                "--rm",
                "--name",
                name,
                *runtime.network_args("isolated"),
                *runtime.run_args,
                PROBE_IMAGE,
                MISSING_COMMAND,
                timeout=PROBE_TIMEOUT_S,
            )
        finally:
            runtime.remove(name)
    except (BackendError, subprocess.SubprocessError, OSError) as exc:
        return False, str(exc)
    words = _last_line(result.stderr) or _last_line(result.stdout)
    works = result.returncode == 127 and any(m in words.lower() for m in NOT_FOUND_MARKERS)
    return works, "" if works else (words or f"{runtime.binary} run exited {result.returncode}")


def find_flags(binary: str, global_args: str, run_args: str) -> ProbeResult:
    """The flags `binary` starts containers with: the given ones when they work, else the
    first of KNOWN_FLAG_SETS that does; `ok` False when none does."""
    works, detail = try_run(_runtime(binary, global_args, run_args))
    if works:
        return ProbeResult(True, global_args, run_args)
    for known_global, known_run in KNOWN_FLAG_SETS:
        if binary != "podman" and known_global:
            continue
        if (known_global, known_run) == (global_args, run_args):
            continue
        if try_run(_runtime(binary, known_global, known_run))[0]:
            return ProbeResult(True, known_global, known_run, detail)
    return ProbeResult(False, global_args, run_args, detail)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
