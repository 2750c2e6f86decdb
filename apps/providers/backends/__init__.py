"""Compute backends: one module per provider kind, all behind `base.Backend`.

`backend_for(provider)` returns the backend for a Provider row. A backend knows nothing of
the database: it gets plain values in and gives JSON-serialisable handles back.
"""

from __future__ import annotations

from apps.providers.backends.base import Backend, BackendError, PermanentBackendError
from apps.providers.backends.local import LocalBackend
from apps.providers.models import Provider

REGISTRY: dict[str, type[Backend]] = {
    Provider.Kind.LOCAL: LocalBackend,
}


def backend_for(provider: Provider) -> Backend:
    try:
        backend_class = REGISTRY[provider.kind]
    except KeyError as exc:
        raise PermanentBackendError(f"No backend for provider kind {provider.kind!r}.") from exc
    return backend_class(provider.config or {})


__all__ = ["REGISTRY", "Backend", "BackendError", "PermanentBackendError", "backend_for"]
