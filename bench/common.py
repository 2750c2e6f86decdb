"""What most benches repeat: a median of timed calls, and an organization that may run jobs.

Import it after Django is set up where a function needs the models (`funded_org`); the
timing helper needs nothing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_ms(fn: Callable[[], Any], repeats: int, *, warm: bool = True) -> float:
    """The median wall time of `repeats` calls of `fn`, in milliseconds; with `warm`, one
    call first that is not counted (caches, the first connection)."""
    if warm:
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def funded_org(slug: str, *, name: str | None = None, credits_micros: int = 10**12):
    """An organization with compute enabled and `credits_micros` granted (a million dollars
    by default: no bench should stop on its balance)."""
    from apps.accounts import services
    from apps.billing import ledger

    org = services.organization_create(name=name or slug, slug=slug, compute_enabled=True)
    ledger.grant(
        organization=org, amount_micros=credits_micros, idempotency_key=f"bench-credits:{slug}"
    )
    return org


def api_key(org, name: str = "bench", **extra) -> str:
    """A new API key of `org` (the secret, as a client sends it)."""
    from apps.accounts import services

    _, key = services.api_key_create(organization=org, name=name, **extra)
    return key
