"""Adding a compute provider: test the connection first, then save the provider and an
offer per accelerator it reports, at the operator's price. Called by `manage.py
add_provider` and the Django admin alike, so neither saves a provider that cannot work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from apps.catalog.models import Accelerator, Offer
from apps.core.errors import InvalidRequest
from apps.providers.backends import backend_class
from apps.providers.backends.base import BackendError
from apps.providers.models import Provider


@dataclass(frozen=True)
class ProviderAdded:
    provider: Provider
    offers: list[Offer]
    found: list[str]  # what the connection test saw (partitions, capacity, python version)


def provider_check(*, kind: str, config: dict[str, Any], credentials: dict[str, str]) -> list[str]:
    """Connect to the provider as configured; raise InvalidRequest naming what is wrong (a
    host key that does not match, a key the host refuses, `sinfo` failing)."""
    try:
        backend = backend_class(kind)(config, credentials)
        return backend.check()
    except BackendError as exc:
        raise InvalidRequest(f"{kind} provider check failed: {exc}", param="config") from exc


def provider_add(
    *,
    name: str,
    kind: str,
    config: dict[str, Any],
    credentials: dict[str, str] | None = None,
    price_micros_hr: int,
    check: bool = True,
) -> ProviderAdded:
    """Create provider `name` with an offer per accelerator its backend reports, priced at
    `price_micros_hr` per GPU (or slot) hour. With `check`, nothing is saved unless the
    connection test passes."""
    credentials = credentials or {}
    if kind not in Provider.Kind.values:
        raise InvalidRequest(f"Unknown provider kind {kind!r}.", param="kind")
    if Provider.objects.filter(name=name).exists():
        raise InvalidRequest(f"A provider named {name!r} exists already.", param="name")
    if price_micros_hr < 0:
        raise InvalidRequest("The price cannot be negative.", param="price")
    found = provider_check(kind=kind, config=config, credentials=credentials) if check else []
    backend = backend_class(kind)(config, credentials)
    try:
        reported = backend.offers()
    except BackendError as exc:
        raise InvalidRequest(f"{kind} provider reports no offers: {exc}", param="config") from exc
    with transaction.atomic():
        provider = Provider(name=name, kind=kind, config=config)
        provider.set_credentials(credentials)
        provider.save()
        offers = []
        for info in reported:
            accelerator = Accelerator.objects.filter(name=info.accelerator).first()
            if accelerator is None:
                raise InvalidRequest(
                    f"The provider reports accelerator {info.accelerator!r}, which the catalog "
                    "does not list.",
                    param="accelerator",
                )
            offers.append(
                Offer.objects.create(
                    provider=provider,
                    accelerator=accelerator,
                    gpu_counts=info.gpu_counts,
                    capacity=info.capacity,
                    price_per_gpu_hour_micros=price_micros_hr,
                    min_price_per_gpu_hour_micros=price_micros_hr,
                    max_price_per_gpu_hour_micros=price_micros_hr,
                )
            )
    return ProviderAdded(provider=provider, offers=offers, found=found)
