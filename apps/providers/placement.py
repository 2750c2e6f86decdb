"""Placement: choose an offer for a job and hold its capacity.

`offers_with_free_capacity` proposes offers cheapest first; each is then locked
(`SELECT ... FOR UPDATE` on the offer row) and its use recounted under the lock, so two
dispatches racing for the last slot cannot both win it: the second waits for the first to
commit, then sees the slot taken and moves on.
"""

from __future__ import annotations

from django.db.models import Sum

from apps.catalog.models import Offer
from apps.catalog.selectors import offers_with_free_capacity


def lock_offer_with_capacity(
    *, accelerator: str, gpu_count: int, max_price_micros_hr: int | None
) -> Offer | None:
    """The cheapest offer that still has `gpu_count` free once locked, or None. Call inside
    a transaction; the lock holds until it ends, so create the Attempt in the same one."""
    for candidate in offers_with_free_capacity(
        accelerator=accelerator, gpu_count=gpu_count, max_price_micros_hr=max_price_micros_hr
    ):
        offer = (
            Offer.objects.select_for_update(of=("self",))
            .select_related("provider", "accelerator")
            .filter(pk=candidate.pk, enabled=True, provider__enabled=True)
            .first()
        )
        if offer is None:
            continue
        used = (
            offer.attempts.filter(ended_at__isnull=True).aggregate(used=Sum("gpu_count"))["used"]
            or 0
        )
        if offer.capacity - used >= gpu_count:
            return offer
    return None
