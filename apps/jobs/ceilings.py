"""Price ceilings: the most a job pays per GPU-hour, what it holds at submit, and ceilings
too low to ever be met.

`limits.max_price_usd_hr` is a ceiling per GPU-hour (a bid, as markets quote it): placement
takes only offers whose current price is at or under it. A job without one is held at the
dearest band ceiling among the offers that could run it, or, while no enabled offer could
(none yet, or all disabled), at the accelerator's reference price in the catalog: never at
$0. Without either, the job must name a ceiling (422 `no_price`). A ceiling under the band
floor of every such offer could never be met: the job is refused (422 `bid_too_low`) with
the lowest price that could clear.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Max, Min
from rest_framework import status

from apps.catalog.models import Accelerator, Offer
from apps.core.errors import ApiError
from apps.core.money import format_usd

STANDARD_MARKETS = (Offer.Market.ON_DEMAND,)
PREEMPTIBLE_MARKETS = (Offer.Market.SPOT, Offer.Market.ON_DEMAND)


class BidTooLow(ApiError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    error_type = "bid_too_low"
    default_detail = "The price ceiling is below every offer that could run this job."


class NoPrice(ApiError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    error_type = "no_price"
    default_detail = "Nothing prices this job: no offer could run it and it names no ceiling."


def markets_for(priority_class: str) -> tuple[str, ...]:
    return PREEMPTIBLE_MARKETS if priority_class == "preemptible" else STANDARD_MARKETS


def offers_that_could_run(*, accelerator: str, gpu_count: int, priority_class: str):
    """Enabled offers of `accelerator` renting `gpu_count` per job in the markets the
    priority class may use, busy or not."""
    offers = Offer.objects.enabled().filter(
        accelerator__name=accelerator, market__in=markets_for(priority_class)
    )
    if connection.features.supports_json_field_contains:
        return offers.filter(gpu_counts__contains=[gpu_count])
    ids = [o.pk for o in offers.only("pk", "gpu_counts") if gpu_count in o.gpu_counts]
    return Offer.objects.filter(pk__in=ids)


@dataclass(frozen=True)
class Band:
    """The per-GPU-hour price band of every offer that could run a job (None: no offer),
    and, when there is no offer, the accelerator's reference price (None: it has none)."""

    floor_micros: int | None
    ceiling_micros: int | None
    reference_micros: int | None = None


def band_for(*, accelerator: str, gpu_count: int, priority_class: str) -> Band:
    prices = offers_that_could_run(
        accelerator=accelerator, gpu_count=gpu_count, priority_class=priority_class
    ).aggregate(
        floor=Min("min_price_per_gpu_hour_micros"), ceiling=Max("max_price_per_gpu_hour_micros")
    )
    reference = None
    if prices["ceiling"] is None:
        reference = (
            Accelerator.objects.filter(name=accelerator)
            .values_list("reference_price_per_gpu_hour_micros", flat=True)
            .first()
        )
    return Band(prices["floor"], prices["ceiling"], reference)


def check_ceiling(max_price_micros_hr: int | None, band: Band) -> None:
    """Refuse a ceiling that no offer that could run the job can ever meet."""
    if max_price_micros_hr is None or band.floor_micros is None:
        return
    if max_price_micros_hr < band.floor_micros:
        raise BidTooLow(
            f"A price ceiling of {format_usd(max_price_micros_hr)} per GPU-hour is below every "
            f"offer that could run this job; the lowest that could clear is "
            f"{format_usd(band.floor_micros)} per GPU-hour.",
            param="limits.max_price_usd_hr",
        )


def hold_ceiling(max_price_micros_hr: int | None, band: Band, *, accelerator: str = "") -> int:
    """The per-GPU-hour price a job is held at: its own ceiling, or the dearest offer's, or
    (no offer could run it now) the accelerator's reference price. Raises NoPrice when
    there is none of the three."""
    if max_price_micros_hr is not None:
        return max_price_micros_hr
    if band.ceiling_micros is not None:
        return band.ceiling_micros
    if band.reference_micros is not None:
        return band.reference_micros
    raise NoPrice(
        f"No enabled offer could run this job now and the catalog has no reference price for "
        f"{accelerator or 'its accelerator'}: name a price ceiling (limits.max_price_usd_hr) "
        "so the job can hold its cost.",
        param="limits.max_price_usd_hr",
    )


def cheapest_price(max_price_micros_hr: int | None, band: Band) -> int:
    """The lowest per-GPU-hour price the job could run at: the band's floor, or (no offer)
    the reference price or its ceiling, whichever is lower; 0 when nothing says."""
    if band.floor_micros is not None:
        return band.floor_micros
    known = [p for p in (band.reference_micros, max_price_micros_hr) if p is not None]
    return min(known, default=0)
