"""The interface every compute backend implements.

Lifecycle of one attempt: `launch` starts the runner with its bootstrap and returns a handle
(JSON-serialisable; stored on the Attempt); `poll` says what became of it; `terminate` asks
it to stop (SIGTERM, then SIGKILL after `grace_s`) without blocking; `release` frees what
the backend holds once the attempt is over. `offers` says what the backend could run.

Rules every backend keeps (the shared contract test checks them):
- `launch` is idempotent per attempt: launching an attempt that is already running returns
  its handle and starts nothing.
- `terminate` and `release` are idempotent and safe on a handle whose process is gone.
- Errors split into RetryableBackendError (try again later) and PermanentBackendError.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from apps.core.errors import Retryable

Handle = dict[str, Any]
PollState = Literal["running", "exited", "lost", "reclaimed"]


class BackendError(Exception):
    """Something went wrong talking to a provider."""


class RetryableBackendError(BackendError, Retryable):
    """Transient: the same call may succeed later."""


class PermanentBackendError(BackendError):
    """The call cannot succeed as asked; retrying will not help. `reason` becomes the
    job's reason when a launch fails so."""

    reason = "launch_failed"


@dataclass(frozen=True)
class Bootstrap:
    """What the runner needs to find its control plane. The token is a secret: a backend
    passes it to the runner's environment and never stores or logs it."""

    control_url: str
    job_id: str
    attempt: int
    token: str


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt: int
    accelerator: str
    gpu_count: int
    ephemeral_disk_gb: int
    image: str
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PollResult:
    state: PollState
    exit_code: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class OfferInfo:
    accelerator: str
    gpu_counts: list[int]
    capacity: int


class Backend(ABC):
    kind: ClassVar[str]

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    @classmethod
    def single_tenant(cls, config: dict[str, Any]) -> bool:
        """True when workloads of different organizations placed here at once could see
        each other; placement then runs one organization's work at a time."""
        return False

    @abstractmethod
    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle: ...

    @abstractmethod
    def poll(self, handle: Handle) -> PollResult: ...

    @abstractmethod
    def terminate(self, handle: Handle, grace_s: float) -> None: ...

    @abstractmethod
    def release(self, handle: Handle) -> None: ...

    @abstractmethod
    def offers(self) -> list[OfferInfo]: ...
