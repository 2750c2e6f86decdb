"""Placement: choose an offer for a job and hold its capacity.

`offers_with_free_capacity` proposes offers cheapest first; each is then locked
(`SELECT ... FOR UPDATE` on the offer row) and its use recounted under the lock, so two
dispatches racing for the last slot cannot both win it: the second waits for the first to
commit, then sees the slot taken and moves on.

Priority classes: a `standard` job runs on on-demand offers only; a `preemptible` one on
spot or on-demand offers, and may be displaced by a standard job (apps.jobs.preemption).
Capacity freed by a displaced attempt is held for the job that displaced it while that job
waits in `requested`: without the hold, the displaced job (or any other) could take the
slot back first.
"""

from __future__ import annotations

from django.db.models import Q, Sum

from apps.catalog.models import Offer
from apps.catalog.selectors import offers_with_free_capacity
from apps.jobs.states import JobState

STANDARD_MARKETS = (Offer.Market.ON_DEMAND,)
PREEMPTIBLE_MARKETS = (Offer.Market.SPOT, Offer.Market.ON_DEMAND)


def markets_for(priority_class: str) -> tuple[str, ...]:
    return PREEMPTIBLE_MARKETS if priority_class == "preemptible" else STANDARD_MARKETS


def held_for_others(offer: Offer, job) -> int:
    """GPUs of `offer` freed by displaced attempts and held for jobs other than `job` that
    are still waiting to be placed."""
    return (
        offer.attempts.filter(
            preempted_by__isnull=False,  # as the partial index attempt_displaced_offer says
            ended_at__isnull=False,
            preempted_by__state=JobState.REQUESTED,
        )
        .filter(~Q(preempted_by=job))
        .aggregate(n=Sum("gpu_count"))["n"]
        or 0
    )


def lock_offer_with_capacity(job) -> Offer | None:
    """The cheapest offer that still has room for `job` once locked, or None. Call inside a
    transaction; the lock holds until it ends, so create the Attempt in the same one."""
    for candidate in offers_with_free_capacity(
        accelerator=job.accelerator,
        gpu_count=job.gpu_count,
        max_price_micros_hr=job.max_price_micros_hr,
        markets=markets_for(job.priority_class),
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
        if offer.capacity - used - held_for_others(offer, job) >= job.gpu_count:
            return offer
    return None
