"""How a backend runs commands where its workloads run: on this host, or on another one over
SSH. Remote backends (ssh, slurm) talk only through a Transport, so the same backend code
drives a host or a Slurm login node whether it is here or across the network.

`run(argv, input=..., timeout=...)` runs one command and returns its CompletedProcess
(bytes). A command that ran and failed is the caller's to judge (look at `returncode`); a
command that could not be run at all (no connection, a time-out) raises
RetryableBackendError, and one that can never run as configured (a host key that does not
match, a key the host refuses) raises PermanentBackendError with a message an operator can
act on.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Protocol

from apps.providers.backends.base import RetryableBackendError

# The environment of a command run here: enough to find programs, nothing of the control
# plane's own secrets (DATABASE_URL, SECRET_KEY, ...).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "SLURM_CONF")


class Transport(Protocol):
    def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[bytes]: ...

    def describe(self) -> str:
        """Where commands run, for messages: `this host`, `ops@gpu-1:22`."""
        ...


class LocalTransport:
    """Commands run on this host, as the control plane's user."""

    def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[bytes]:
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        try:
            return subprocess.run(
                list(argv),
                input=input,
                capture_output=True,
                timeout=timeout,
                env=env,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RetryableBackendError(f"{argv[0]} timed out after {timeout:g}s") from exc
        except OSError as exc:
            raise RetryableBackendError(f"could not run {argv[0]}: {exc.strerror}") from exc

    def describe(self) -> str:
        return "this host"
