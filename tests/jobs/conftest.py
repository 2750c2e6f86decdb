"""Fixtures for the jobs tests."""

from __future__ import annotations

import uuid

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.providers.models import Provider


@pytest.fixture
def slots(db):
    """An accelerator of the test's own, with offers made to measure."""
    accelerator = Accelerator.objects.create(
        name=f"slot-{uuid.uuid4().hex[:6]}", display_name="Slot", vendor="cpu", gpu_counts=[1]
    )
    provider = Provider.objects.get(name="local")

    def offer(capacity: int, *, market: str = Offer.Market.ON_DEMAND, price: int = 600_000):
        return Offer.objects.create(
            provider=provider,
            accelerator=accelerator,
            gpu_counts=[1],
            capacity=capacity,
            market=market,
            price_per_gpu_hour_micros=price,
            min_price_per_gpu_hour_micros=price,
            max_price_per_gpu_hour_micros=price,
        )

    offer.accelerator = accelerator.name
    return offer
