"""Placement: which offers can take a job now, what a quote says, and choosing an offer for
a job and holding its capacity.

Placement and the quote endpoint share `offers_with_free_capacity`, so a quote that says
`available` names exactly the offers placement would consider at that moment. A quote
reserves nothing: placement allocates under a lock and re-checks capacity. Capacity is the
sum of the offer's live attempts, so it lives here with the Attempt, not in the catalog.
Money is integer micro-dollars (1,000,000 = $1); converting to dollars is the API's job.

`offers_with_free_capacity` proposes offers cheapest first; each is then locked
(`SELECT ... FOR UPDATE` on the offer row) and its use recounted under the lock, so two
dispatches racing for the last slot cannot both win it: the second waits for the first to
commit, then sees the slot taken and moves on.

Priority classes: a `standard` job runs on on-demand offers only; a `preemptible` one on
spot or on-demand offers, and may be displaced by a standard job (apps.jobs.execution.preemption).
Capacity freed by a displaced attempt is held for the job that displaced it while that job
waits in `requested`: without the hold, the displaced job (or any other) could take the
slot back first.

Tenancy: a single-tenant provider (the local host runtime, where workloads could see each
other) takes one organization's work at a time; another organization's job waits for it
or goes elsewhere. A job that reads paths on the host (a fine-tune's model or dataset given
as a path) is placed only on single-tenant providers.

GPU devices: on a provider that is one host (`assigns_gpu_devices`: local and ssh, not
Slurm, whose gres picks a node's GPUs itself), each GPU attempt gets its own device indices,
the lowest that no live attempt on the provider holds, as many as the job's `gpu_count`,
stored on the Attempt (`gpu_devices`) and passed to the backend, which exposes only those.
The host's GPUs are numbered 0..N-1, N the sum of the capacities of the provider's GPU
offers (enabled or not): offers on one host share out its GPUs, as slot counting already
assumes, so an offer with room always finds its indices free. They are chosen with the
provider's row locked (after the offer's, once it fits, unless tenancy locked it first), so
two placements on two offers of one host cannot pick the same index. An offer whose host
has too few free indices anyway (attempts the operator's capacity edits left behind) is
passed over like a full one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import F, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.catalog.models import Offer
from apps.jobs.ceilings import markets_for
from apps.jobs.kinds import hooks_for
from apps.jobs.models import Attempt
from apps.jobs.states import JobState
from apps.providers.backends import assigns_gpu_devices, serves_endpoints, single_tenant
from apps.providers.models import Provider


def offers_with_free_capacity(
    *,
    accelerator: str,
    gpu_count: int,
    max_gpu_price_micros_hr: int | None = None,
    markets: tuple[str, ...] | None = None,
    min_free: int | None = None,
) -> list[Offer]:
    """Enabled offers (offer and provider enabled) of `accelerator` that rent `gpu_count`
    GPUs per job, have at least `gpu_count` free now (`min_free` when given: 0 lists full
    offers too, for preemption) and, when `max_gpu_price_micros_hr` is given, cost at most
    that per GPU-hour (a job's price ceiling, apps.jobs.ceilings); only `markets` when
    given. Cheapest first, then by id.

    Each offer carries three annotations:
    - `used`: GPUs held by its live attempts (`ended_at` NULL), 0 when none;
    - `free`: `capacity - used` (always >= `gpu_count` in the result);
    - `job_price_micros_hr`: `price_per_gpu_hour_micros * gpu_count`.
    `provider` and `accelerator` are loaded with the offer. One query.

    `gpu_counts` is a JSON list. Where the database can test JSON containment (PostgreSQL's
    jsonb `@>`, `connection.features.supports_json_field_contains`) the filter runs in SQL;
    SQLite, the embedded default, cannot, so there the same test runs in Python on the
    rows the query returns. An accelerator has a handful of offers, so the fallback costs
    nothing worth a database-specific expression, and the result is the same either way.
    """
    in_sql = connection.features.supports_json_field_contains
    # The live attempts' GPUs by a subquery on the partial index `attempt_live_offer`: a
    # join of all the offer's attempts would read its whole history on every placement.
    live_gpus = (
        Attempt.objects.filter(offer=OuterRef("pk"), ended_at__isnull=True)
        .order_by()
        .values("offer")
        .annotate(total=Sum("gpu_count"))
        .values("total")
    )
    offers = (
        Offer.objects.enabled()
        .filter(accelerator__name=accelerator)
        .select_related("provider", "accelerator")
        .annotate(
            used=Coalesce(Subquery(live_gpus), Value(0), output_field=IntegerField()),
            free=F("capacity") - F("used"),
            job_price_micros_hr=F("price_per_gpu_hour_micros") * Value(gpu_count),
        )
        .filter(free__gte=gpu_count if min_free is None else min_free)
        .order_by("price_per_gpu_hour_micros", "id")
    )
    if markets is not None:
        offers = offers.filter(market__in=markets)
    if in_sql:
        offers = offers.filter(gpu_counts__contains=[gpu_count])
    if max_gpu_price_micros_hr is not None:
        offers = offers.filter(price_per_gpu_hour_micros__lte=max_gpu_price_micros_hr)
    result = list(offers)
    if not in_sql:
        result = [offer for offer in result if gpu_count in offer.gpu_counts]
    return result


@dataclass(frozen=True)
class QuoteResult:
    """A live observation, not a reservation. Prices are for the whole job per hour, in
    micro-dollars, from the offers' bands; both are None exactly when `available` is
    False."""

    available: bool
    price_min_micros_hr: int | None
    price_max_micros_hr: int | None
    observed_at: datetime


def quote(*, accelerator: str, gpu_count: int) -> QuoteResult:
    """Whether `gpu_count` x `accelerator` is obtainable now, and the hourly price range
    across the offers that could take it: the lowest band floor to the highest band
    ceiling (`min_/max_price_per_gpu_hour_micros * gpu_count`). Writes nothing."""
    offers = offers_with_free_capacity(accelerator=accelerator, gpu_count=gpu_count)
    observed_at = timezone.now()
    if not offers:
        return QuoteResult(False, None, None, observed_at)
    return QuoteResult(
        available=True,
        price_min_micros_hr=min(o.min_price_per_gpu_hour_micros for o in offers) * gpu_count,
        price_max_micros_hr=max(o.max_price_per_gpu_hour_micros for o in offers) * gpu_count,
        observed_at=observed_at,
    )


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


def _held_by_another_tenant(offer: Offer, job) -> bool:
    """Whether another organization's attempt is live on any offer of `offer`'s provider.
    Call with the provider's row locked."""
    return (
        Attempt.objects.filter(provider_id=offer.provider_id, ended_at__isnull=True)
        .exclude(job__organization_id=job.organization_id)
        .exists()
    )


def free_gpu_devices(provider_id: int, count: int) -> tuple[int, ...] | None:
    """The `count` lowest GPU indices of the provider's host that none of its live attempts
    holds, or None when fewer are free. Call with the provider's row locked."""
    offers = Offer.objects.filter(provider_id=provider_id)
    total = offers.exclude(accelerator__name="cpu").aggregate(n=Sum("capacity"))["n"] or 0
    live = Attempt.objects.filter(offer__in=offers, ended_at__isnull=True)
    held = {int(i) for devices in live.values_list("gpu_devices", flat=True) for i in devices}
    free = [index for index in range(total) if index not in held]
    return tuple(free[:count]) if len(free) >= count else None


@dataclass(frozen=True)
class Placement:
    """Where a job goes: the offer (locked) and, on a host whose GPUs placement numbers,
    the device indices its attempt gets."""

    offer: Offer
    gpu_devices: tuple[int, ...] = ()


def lock_offer_with_capacity(job) -> Placement | None:
    """The cheapest offer that still has room for `job` once locked (with the GPU devices
    its attempt gets), or None. Call inside a transaction; the locks hold until it ends, so
    create the Attempt in the same one."""
    hooks = hooks_for(job)
    reads_host_paths = bool(hooks.host_paths(job))
    wants_gpus = job.accelerator != "cpu" and job.gpu_count > 0
    for candidate in offers_with_free_capacity(
        accelerator=job.accelerator,
        gpu_count=job.gpu_count,
        max_gpu_price_micros_hr=job.max_price_micros_hr,
        markets=markets_for(job.priority_class),
    ):
        # A single-tenant provider's row is locked before its offer's (always in that
        # order), so placements on any of its offers take turns.
        if hooks.serves and not serves_endpoints(candidate.provider):
            continue  # the control plane could not reach the server
        tenant_bound = single_tenant(candidate.provider)
        if reads_host_paths and not tenant_bound:
            continue  # a path on the host is no one else's business, and no container's
        if tenant_bound:
            Provider.objects.select_for_update(no_key=True).filter(pk=candidate.provider_id).first()
        offer = (
            Offer.objects.select_for_update(of=("self",), no_key=True)
            .select_related("provider", "accelerator")
            .filter(pk=candidate.pk, enabled=True, provider__enabled=True)
            .first()
        )
        if offer is None or (tenant_bound and _held_by_another_tenant(offer, job)):
            continue
        used = (
            offer.attempts.filter(ended_at__isnull=True).aggregate(used=Sum("gpu_count"))["used"]
            or 0
        )
        if offer.capacity - used - held_for_others(offer, job) < job.gpu_count:
            continue
        if not (wants_gpus and assigns_gpu_devices(offer.provider)):
            return Placement(offer)
        if not tenant_bound:
            # Only once the offer fits, so a placement holds no host's lock while it moves
            # on to another offer (two could then wait on each other's hosts).
            Provider.objects.select_for_update(no_key=True).filter(pk=offer.provider_id).first()
        devices = free_gpu_devices(offer.provider_id, job.gpu_count)
        if devices is not None:
            return Placement(offer, devices)
    return None
