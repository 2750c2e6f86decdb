"""The interface every compute backend implements.

Lifecycle of one attempt: `launch` starts the runner with its bootstrap and returns a handle
(JSON-serialisable; stored on the Attempt); `poll` says what became of it; `terminate` asks
it to stop (SIGTERM, then SIGKILL after `grace_s`) without blocking; `release` frees what
the backend holds once the attempt is over. `offers` says what the backend could run;
`diagnostics` gives lines that explain a stalled or failed launch (they become the job's
system log lines). `endpoint_url` says how the control plane reaches a serving workload.

`poll_many(handles)` asks about many attempts of one provider at once, for the reconcile pass:
one answer per handle, in the handles' order, each a PollResult or the BackendError that
handle's own poll would have raised (one bad handle never loses the others' answers). When
the provider cannot be asked at all (its host or login node is out of reach) it raises that
RetryableBackendError instead, and the caller treats every handle as a `poll` that raised it.
The default asks `poll` once per handle; a backend whose poll is a round trip (an SSH
command, a `squeue`) overrides it with one round trip for all of them.

`poll` answers one of:
- `queued`: the provider has the request but has not given it hardware yet (a batch queue);
  `detail` is the provider's reason (Slurm's `Priority`, `Resources`, ...). The attempt stays
  `provisioning`, is not billed and is not declared lost for missing heartbeats.
- `running`: the hardware is ours and the runner runs (or is starting).
- `exited` with the runner's exit code; `lost` (gone with no exit record); `reclaimed` (the
  provider took the hardware back: preempted, node failure).
- `failed` with a `reason` (`image_pull_failed`, `out_of_memory`, `launch_failed`): the
  provider says the attempt cannot run or ended for a cause of its own that placing it again
  would not cure; the job fails with that reason and `detail` as its message.

Billing starts when the provider allocates the hardware. A backend whose `launch` gets the
hardware at once (a host slot) says `ALLOCATES_AT_LAUNCH = True` and billing starts at
placement; one with a queue says False and billing starts at the first `running` poll or the
runner's `started` report, whichever comes first.

Rules every backend keeps (the shared contract test checks them):
- `launch` is idempotent per attempt: launching an attempt that is already running returns
  its handle and starts nothing.
- `terminate` and `release` are idempotent and safe on a handle whose process is gone.
- Errors split into RetryableBackendError (try again later) and PermanentBackendError.
- A transport failure (an SSH connection that drops) is retryable and never by itself a
  `lost`: the runner heartbeats over HTTP, and the control plane decides on that. In
  `poll_many` too: a batch whose transport failed raises, it never answers `lost`.
- `poll_many(handles)` answers each handle as `poll(handle)` would.
- The runner token is never in argv, a batch script, a manifest or a log: it travels as a
  0600 file that the runner reads and deletes at start.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from apps.core.errors import Retryable
from runner import protocol

Handle = dict[str, Any]
PollState = Literal["queued", "running", "exited", "lost", "reclaimed", "failed"]


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


def relay_env(config: Mapping[str, Any]) -> dict[str, str]:
    """The runner's `TRAINYARD_RELAY_URL` when the provider's config names a relay on its
    hosts (`relay_url`, e.g. `http://127.0.0.1:8790`: a `runner.relay` the operator runs on
    each host, reachable there at that address); nothing when it names none."""
    url = str(config.get("relay_url") or "").strip()
    return {protocol.ENV_RELAY_URL: url} if url else {}


def gpu_env(devices: Sequence[int]) -> dict[str, str]:
    """The host runtime's `CUDA_VISIBLE_DEVICES`: only the attempt's own GPUs, "" (none) for
    an attempt without any. It steers CUDA, it is no wall: a process on the host can still
    open every /dev/nvidia* it may, which is why several organizations share a host only in
    containers. Not for a container, which sees its own devices numbered from 0 (nor
    NVIDIA_VISIBLE_DEVICES, which only the NVIDIA container hook reads)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(int(index)) for index in devices)}


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt: int
    accelerator: str
    gpu_count: int
    ephemeral_disk_gb: int
    image: str
    extra_env: dict[str, str] = field(default_factory=dict)
    # The job's max runtime, for a batch system's own time limit (Slurm's --time); None
    # when the job has none.
    max_runtime_hours: float | None = None
    # The host's GPU indices placement gave this attempt (Attempt.gpu_devices), for a
    # backend that `ASSIGNS_GPU_DEVICES`: it exposes these and no other. () for a CPU
    # attempt, and on a provider that assigns GPUs itself (Slurm's gres).
    gpu_devices: tuple[int, ...] = ()
    # Names the job's organization for what a backend keeps per organization (the local
    # provider's hub cache); never shown to a workload of another organization.
    organization_key: str = ""


@dataclass(frozen=True)
class PollResult:
    state: PollState
    exit_code: int | None = None
    detail: str = ""
    reason: str = ""  # for `failed`: the job's reason


# One handle's answer in `poll_many`: what `poll` returned, or the error it raised.
PollOutcome = PollResult | BackendError


def poll_outcome(poll: Callable[[Handle], PollResult], handle: Handle) -> PollOutcome:
    """`poll(handle)`, or the error it raised as a BackendError (any other exception, a
    handle without the keys a backend needs say, wrapped in a PermanentBackendError whose
    cause it is), so that one handle's failure stays that handle's."""
    try:
        return poll(handle)
    except BackendError as exc:
        return exc
    except Exception as exc:
        return failed_poll(exc)


def failed_poll(exc: Exception) -> PermanentBackendError:
    """A PermanentBackendError standing for an unexpected error `exc` of one handle's poll
    (its cause, so the traceback is logged with it)."""
    error = PermanentBackendError(f"poll failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


@dataclass(frozen=True)
class OfferInfo:
    accelerator: str
    gpu_counts: list[int]
    capacity: int


class Backend(ABC):
    kind: ClassVar[str]
    # True when `launch` holds the hardware at once (billing starts at placement); False for
    # a batch queue (billing starts when the attempt first runs).
    ALLOCATES_AT_LAUNCH: ClassVar[bool] = True
    # True when `endpoint_url` can reach a workload's server (serve jobs are placed only here).
    SERVES_ENDPOINTS: ClassVar[bool] = False
    # True when a provider is one host whose GPUs placement numbers 0..N-1 and gives out
    # per attempt (LaunchRequest.gpu_devices); False where the provider picks them itself.
    ASSIGNS_GPU_DEVICES: ClassVar[bool] = True

    def __init__(self, config: dict[str, Any], credentials: dict[str, str] | None = None) -> None:
        """`config` is the Provider's settings; `credentials` its decrypted write-only
        values (an SSH private key): keep them in memory, never in a handle or a log."""
        self.config = config
        self.credentials = credentials or {}

    @classmethod
    def single_tenant(cls, config: dict[str, Any]) -> bool:
        """True when workloads of different organizations placed here at once could see
        each other; placement then runs one organization's work at a time."""
        return False

    @classmethod
    def where_it_runs(cls, handle: Handle) -> str:
        """Where, and as whom, a launched attempt's workload runs, in words for its job page
        ("in a podman container of image …", "on gpu-1 as ty-…"); "" when the handle does not
        say."""
        return ""

    @abstractmethod
    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle: ...

    @abstractmethod
    def poll(self, handle: Handle) -> PollResult: ...

    def poll_many(self, handles: Sequence[Handle]) -> list[PollOutcome]:
        """What `poll` answers for each of `handles` (one provider's), in their order; a
        handle whose poll failed gets its BackendError in its place. Raises only when the
        provider could not be asked about any of them (a RetryableBackendError for a
        transport that is out of reach). The default polls one handle at a time."""
        return [poll_outcome(self.poll, handle) for handle in handles]

    @abstractmethod
    def terminate(self, handle: Handle, grace_s: float) -> None: ...

    @abstractmethod
    def release(self, handle: Handle) -> None: ...

    @abstractmethod
    def offers(self) -> list[OfferInfo]: ...

    def diagnostics(self, handle: Handle) -> list[str]:
        """Lines that explain a stalled or failed launch: the batch system's output, the
        remote runner's log tail. Never raises; [] when there is nothing to say."""
        return []

    def endpoint_url(self, handle: Handle, port: int) -> str:
        """The base URL (`http://host:port`) at which the control plane reaches a server the
        attempt's workload listens on at `port` (a serve job's engine). Raises
        PermanentBackendError where this backend cannot reach it; a backend that can says
        `SERVES_ENDPOINTS = True`, and only such providers get serve jobs."""
        raise PermanentBackendError(f"The {self.kind} provider cannot serve endpoints.")

    def check(self) -> list[str]:
        """Test the connection to the provider before it is saved; raises
        PermanentBackendError naming what is wrong. Returns what was found (lines)."""
        return [f"{offer.accelerator}: capacity {offer.capacity}" for offer in self.offers()]
