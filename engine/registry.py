"""What the engine serves, and its counters: one lock over both.

An adapter's life: `reserve` (while its weights load: the name is taken and counts towards
`max_loras`), `commit` (served), `unload` (no longer served: new requests for it get 404, but
the ones in flight finish), and, once its in-flight count is zero, the `on_drained` hook runs
once, off the lock; the hook deletes the weights and then calls `forget`, which frees the name
and its slot. A name is taken from `reserve` until `forget`, so a name can never serve two sets
of weights at once.

Every generation request is `acquire`d before it is queued and `release`d exactly once when it
ends, however it ends; the counts of /trainyard/stats come from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import ApiError, model_not_found


@dataclass
class Adapter:
    name: str
    path: str
    created: int
    served: bool = False  # False while loading and once unloaded
    in_flight: int = 0
    requests_total: int = 0


class Registry:
    def __init__(
        self,
        *,
        base_name: str,
        base_root: str,
        max_loras: int,
        on_drained: Callable[[str], None] | None = None,
    ) -> None:
        self.base_name = base_name
        self._base_root = base_root
        self._created = int(time.time())
        self._max_loras = max_loras
        self.on_drained = on_drained
        self._lock = threading.Lock()
        self._adapters: dict[str, Adapter] = {}  # every name taken: loading, served or draining
        self.requests_total = 0
        self.requests_in_flight = 0
        self.cancelled_total = 0
        self.generated_tokens_total = 0
        self.batches_total = 0
        self.max_batch_seen = 0

    # -- adapters ------------------------------------------------------------------------

    def taken(self, name: str) -> bool:
        with self._lock:
            return name in self._adapters

    def served(self, name: str) -> bool:
        with self._lock:
            adapter = self._adapters.get(name)
            return name == self.base_name or (adapter is not None and adapter.served)

    def reserve(self, name: str, path: str) -> None:
        """Take `name` for an adapter about to be loaded; 400 `adapter_exists` when it is
        taken, 400 `too_many_adapters` when max_loras adapters are resident."""
        with self._lock:
            if name in self._adapters:
                raise ApiError(400, "adapter_exists", f"an adapter named {name!r} is loaded")
            if len(self._adapters) >= self._max_loras:
                raise ApiError(
                    400,
                    "too_many_adapters",
                    f"{self._max_loras} adapters are loaded already (max_loras); unload one",
                )
            self._adapters[name] = Adapter(name, path, int(time.time()))

    def commit(self, name: str) -> None:
        with self._lock:
            self._adapters[name].served = True

    def forget(self, name: str) -> None:
        """Free the name of an adapter whose load failed or whose weights are deleted."""
        with self._lock:
            self._adapters.pop(name, None)

    def unload(self, name: str) -> None:
        """Stop serving `name` (404 `model_not_found` if it is not served); its weights go once
        its requests in flight are done."""
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is None or not adapter.served:
                raise model_not_found(name)
            adapter.served = False
            drained = adapter.in_flight == 0
        if drained:
            self._drained(name)

    # -- requests --------------------------------------------------------------------------

    def acquire(self, model: str) -> str | None:
        """Count a request for `model` as in flight; the adapter name, or None for the base.
        404 `model_not_found` for a name not served."""
        with self._lock:
            if model == self.base_name:
                adapter = None
            else:
                adapter = self._adapters.get(model)
                if adapter is None or not adapter.served:
                    raise model_not_found(model)
                adapter.in_flight += 1
                adapter.requests_total += 1
            self.requests_total += 1
            self.requests_in_flight += 1
        return adapter.name if adapter else None

    def release(self, adapter_name: str | None, *, cancelled: bool = False) -> None:
        """The end of a request `acquire` counted; call exactly once per request."""
        drained = False
        with self._lock:
            self.requests_in_flight -= 1
            if cancelled:
                self.cancelled_total += 1
            adapter = self._adapters.get(adapter_name) if adapter_name else None
            if adapter is not None:
                adapter.in_flight -= 1
                drained = not adapter.served and adapter.in_flight == 0
        if drained:
            self._drained(adapter.name)

    def _drained(self, name: str) -> None:
        if self.on_drained is None:
            self.forget(name)
        else:
            self.on_drained(name)

    def count_tokens(self, tokens: int) -> None:
        with self._lock:
            self.generated_tokens_total += tokens

    def count_batch(self, rows: int) -> None:
        with self._lock:
            self.batches_total += 1
            self.max_batch_seen = max(self.max_batch_seen, rows)

    # -- answers ---------------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        """The `data` of GET /v1/models: the base, then every served adapter by load time."""
        with self._lock:
            adapters = [adapter for adapter in self._adapters.values() if adapter.served]
        base = {
            "id": self.base_name,
            "object": "model",
            "created": self._created,
            "owned_by": "trainyard",
            "root": self._base_root,
            "parent": None,
        }
        return [base] + [
            {
                "id": adapter.name,
                "object": "model",
                "created": adapter.created,
                "owned_by": "trainyard",
                "root": adapter.path,
                "parent": self.base_name,
            }
            for adapter in adapters
        ]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests_total": self.requests_total,
                "requests_in_flight": self.requests_in_flight,
                "cancelled_total": self.cancelled_total,
                "generated_tokens_total": self.generated_tokens_total,
                "batches_total": self.batches_total,
                "max_batch_seen": self.max_batch_seen,
                # Draining adapters too, until their weights are gone; not those still loading.
                "adapters": {
                    adapter.name: {
                        "in_flight": adapter.in_flight,
                        "requests_total": adapter.requests_total,
                    }
                    for adapter in self._adapters.values()
                    if adapter.served or adapter.requests_total
                },
            }
