"""Offers and the attempts that hold them. The migrations seed the `local` provider with a
`cpu` offer: capacity 2, gpu_counts [1], $0.10 per slot-hour."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.catalog.models import Accelerator, Offer
from apps.jobs.models import Attempt, Job
from apps.providers.models import Provider
from tests.factories import ProjectFactory


@pytest.fixture
def cpu_offer(db) -> Offer:
    return Offer.objects.get(provider__name="local", accelerator__name="cpu")


@pytest.fixture
def make_offer(db):
    """An offer on a provider named `provider` (created when new). Prices are micro-dollars
    per GPU-hour; the band defaults to the single price (on-demand)."""

    def make(
        provider: str,
        accelerator: str = "nvidia-a100-80gb",
        *,
        price: int,
        band: tuple[int, int] | None = None,
        capacity: int = 8,
        gpu_counts: list[int] | None = None,
        market: str = Offer.Market.ON_DEMAND,
        enabled: bool = True,
    ) -> Offer:
        owner, _ = Provider.objects.get_or_create(name=provider, defaults={"kind": "ssh"})
        low, high = band or (price, price)
        return Offer.objects.create(
            provider=owner,
            accelerator=Accelerator.objects.get(name=accelerator),
            gpu_counts=gpu_counts if gpu_counts is not None else [1, 2, 4, 8],
            capacity=capacity,
            market=market,
            price_per_gpu_hour_micros=price,
            min_price_per_gpu_hour_micros=low,
            max_price_per_gpu_hour_micros=high,
            enabled=enabled,
        )

    return make


@pytest.fixture
def hold(org):
    """An attempt of a fresh job of `org` on `offer` holding `gpu_count` GPUs; `ended=True`
    makes it an attempt that has already given them back."""
    project = ProjectFactory(organization=org)

    def make(offer: Offer, gpu_count: int = 1, *, ended: bool = False) -> Attempt:
        job = Job.objects.create(
            organization=org,
            project=project,
            name="holder",
            spec={},
            accelerator=offer.accelerator.name,
            gpu_count=gpu_count,
            ephemeral_disk_gb=10,
        )
        return Attempt.objects.create(
            job=job,
            number=1,
            provider=offer.provider,
            offer=offer,
            accelerator=offer.accelerator.name,
            gpu_count=gpu_count,
            price_micros_hr=offer.price_per_gpu_hour_micros * gpu_count,
            ended_at=timezone.now() if ended else None,
        )

    return make
