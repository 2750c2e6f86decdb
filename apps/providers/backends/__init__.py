"""Compute backends: one module (or package) per provider kind, all behind `base.Backend`.

`backend_for(provider)` returns the backend for a Provider row. `REGISTRY` names each kind's
class by dotted path and imports it on first use, so a kind's client library (SSH, Slurm,
Kubernetes) loads only in a process that uses that kind. A backend knows nothing of the
database: it gets plain values in and gives JSON-serialisable handles back.
"""

from __future__ import annotations

from functools import cache

from django.utils.module_loading import import_string

from apps.providers.backends.base import Backend, BackendError, PermanentBackendError
from apps.providers.models import Provider

REGISTRY: dict[str, str] = {
    Provider.Kind.LOCAL: "apps.providers.backends.local.LocalBackend",
    Provider.Kind.SSH: "apps.providers.backends.ssh.SshBackend",
    Provider.Kind.SLURM: "apps.providers.backends.slurm.SlurmBackend",
    Provider.Kind.KUBERNETES: "apps.providers.backends.kubernetes.KubernetesBackend",
}


@cache
def backend_class(kind: str) -> type[Backend]:
    """The backend class of a provider kind, imported on first use."""
    try:
        path = REGISTRY[kind]
    except KeyError as exc:
        raise PermanentBackendError(f"No backend for provider kind {kind!r}.") from exc
    return import_string(path)


def backend_for(provider: Provider) -> Backend:
    return backend_class(provider.kind)(provider.config or {}, provider.credentials())


def single_tenant(provider: Provider) -> bool:
    """Whether `provider` may run only one organization's work at a time. A kind with no
    backend runs nothing (its launch fails `launch_failed`), so it needs no such rule."""
    try:
        backend = backend_class(provider.kind)
    except PermanentBackendError:
        return False
    return backend.single_tenant(provider.config or {})


def serves_endpoints(provider: Provider) -> bool:
    """Whether the control plane can reach a server a workload runs on `provider`."""
    try:
        return backend_class(provider.kind).SERVES_ENDPOINTS
    except PermanentBackendError:
        return False


def allocates_at_launch(provider: Provider) -> bool:
    """Whether `provider` holds the hardware from placement on (billing starts then), or
    queues first (billing starts when the attempt runs). A kind with no backend never
    launches, so it is never billed past the one minute of its failed attempt either way."""
    try:
        return backend_class(provider.kind).ALLOCATES_AT_LAUNCH
    except PermanentBackendError:
        return True


def assigns_gpu_devices(provider: Provider) -> bool:
    """Whether placement numbers `provider`'s GPUs and gives each GPU attempt its own
    (Backend.ASSIGNS_GPU_DEVICES); a kind with no backend runs nothing, so it needs none."""
    try:
        return backend_class(provider.kind).ASSIGNS_GPU_DEVICES
    except PermanentBackendError:
        return False


def where_it_runs(provider: Provider | None, handle: object) -> str:
    """`Backend.where_it_runs` of an attempt on `provider`; "" before its launch, or when its
    kind has no backend."""
    if provider is None or not isinstance(handle, dict) or not handle:
        return ""
    try:
        return backend_class(provider.kind).where_it_runs(handle)
    except PermanentBackendError:
        return ""


__all__ = [
    "REGISTRY",
    "Backend",
    "BackendError",
    "PermanentBackendError",
    "allocates_at_launch",
    "assigns_gpu_devices",
    "backend_for",
    "serves_endpoints",
    "single_tenant",
]
