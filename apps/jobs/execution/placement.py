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

Why a job waits: `rule_out` (what an offer could never take) and `room_on` (whether it has
room now) are the rules placement applies to each candidate, and `explain` applies the same
two to every offer, without locks, to say offer by offer why a waiting job is not placed
(the API's `waiting_reason`, the job page, `POST /api/v1/compute/jobs/plan`). The SQL of
`offers_with_free_capacity` only narrows placement's candidates to offers those rules would
pass anyway; a new rule goes into `rule_out` or `room_on`, so both see it.

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
from apps.core.money import format_usd
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
        .filter(~Q(preempted_by_id=job.pk))
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
    create the Attempt in the same one.

    Each candidate is judged by `rule_out` and `room_on`, the functions `explain` uses to
    say why a job waits: the SQL of `offers_with_free_capacity` only narrows the list."""
    wants = Wants.of(job)
    for candidate in offers_with_free_capacity(
        accelerator=job.accelerator,
        gpu_count=job.gpu_count,
        max_gpu_price_micros_hr=job.max_price_micros_hr,
        markets=wants.markets,
    ):
        if rule_out(candidate, wants) is not None:
            continue
        # A single-tenant provider's row is locked before its offer's (always in that
        # order), so placements on any of its offers take turns.
        tenant_bound = single_tenant(candidate.provider)
        if tenant_bound:
            Provider.objects.select_for_update(no_key=True).filter(pk=candidate.provider_id).first()
        offer = (
            Offer.objects.select_for_update(of=("self",), no_key=True)
            .select_related("provider", "accelerator")
            .filter(pk=candidate.pk, enabled=True, provider__enabled=True)
            .first()
        )
        if offer is None:
            continue
        room = room_on(offer, job, wants, tenant_bound=tenant_bound, lock=True)
        if room.excluded is None:
            return Placement(offer, room.gpu_devices)
    return None


# -- why a job waits: the same rules, offer by offer ------------------------------------------

RUNTIME_TENANCY = "runtime_tenancy"
PRICE_CEILING = "price_ceiling"
ACCELERATOR = "accelerator"
GPU_COUNT = "gpu_count"
MARKET = "market"
CAPACITY_FULL = "capacity_full"
PROVIDER_DISABLED = "provider_disabled"
OFFER_DISABLED = "offer_disabled"
SERVES_ENDPOINTS = "serves_endpoints"
TENANT_BUSY = "tenant_busy"

# The order rules are checked in: an offer excluded by a later one came nearer to taking
# the job, so the summary speaks of the nearest.
EXCLUSION_CODES = (
    PROVIDER_DISABLED,
    OFFER_DISABLED,
    ACCELERATOR,
    GPU_COUNT,
    MARKET,
    PRICE_CEILING,
    SERVES_ENDPOINTS,
    RUNTIME_TENANCY,
    TENANT_BUSY,
    CAPACITY_FULL,
)


@dataclass(frozen=True)
class Exclusion:
    """Why one offer cannot take a job: a stable `code` (EXCLUSION_CODES) and a sentence."""

    code: str
    message: str


@dataclass(frozen=True)
class Wants:
    """What a job asks of an offer, read once from the job (saved or not)."""

    accelerator: str
    gpu_count: int
    max_price_micros_hr: int | None
    markets: tuple[str, ...]
    serves: bool
    host_paths: tuple[str, ...]

    @classmethod
    def of(cls, job) -> Wants:
        hooks = hooks_for(job)
        return cls(
            accelerator=job.accelerator,
            gpu_count=job.gpu_count,
            max_price_micros_hr=job.max_price_micros_hr,
            markets=markets_for(job.priority_class),
            serves=hooks.serves,
            host_paths=tuple(hooks.host_paths(job)),
        )


def rule_out(offer: Offer, wants: Wants) -> Exclusion | None:
    """Why `offer` could never take a job that `wants` this, whatever else runs (None: it
    could, given room). No query: `offer.provider` and `offer.accelerator` loaded."""
    provider = offer.provider
    if not provider.enabled:
        return Exclusion(PROVIDER_DISABLED, f"Provider {provider.name} is disabled.")
    if not offer.enabled:
        return Exclusion(OFFER_DISABLED, "This offer is disabled.")
    if offer.accelerator.name != wants.accelerator:
        return Exclusion(
            ACCELERATOR, f"It offers {offer.accelerator.name}, not {wants.accelerator}."
        )
    if wants.gpu_count not in (offer.gpu_counts or []):
        counts = ", ".join(str(n) for n in offer.gpu_counts or []) or "none"
        return Exclusion(GPU_COUNT, f"It rents {counts} GPUs per job, not {wants.gpu_count}.")
    if offer.market not in wants.markets:
        return Exclusion(
            MARKET, f"It is a {offer.market} offer; a standard job runs only on on-demand ones."
        )
    ceiling = wants.max_price_micros_hr
    if ceiling is not None and offer.price_per_gpu_hour_micros > ceiling:
        return Exclusion(
            PRICE_CEILING,
            f"It costs {format_usd(offer.price_per_gpu_hour_micros)} per GPU-hour, above the "
            f"job's ceiling of {format_usd(ceiling)}.",
        )
    if wants.serves and not serves_endpoints(provider):
        return Exclusion(
            SERVES_ENDPOINTS, f"The control plane cannot reach a server on {provider.name}."
        )
    if wants.host_paths and not single_tenant(provider):
        paths = ", ".join(wants.host_paths)
        return Exclusion(
            RUNTIME_TENANCY,
            f"The job reads paths on the host ({paths}), so it runs only on a single-tenant "
            f"provider, and {provider.name} runs several organizations' work (on a local "
            "host: LOCAL_RUNTIME=host).",
        )
    return None


@dataclass(frozen=True)
class Room:
    excluded: Exclusion | None
    gpu_devices: tuple[int, ...] = ()


def room_on(offer: Offer, job, wants: Wants, *, tenant_bound: bool, lock: bool) -> Room:
    """Whether `offer` has room for `job` now: no other organization's work on a
    single-tenant provider, free GPUs (less those held for displacing jobs), and free
    device indices where placement numbers them. With `lock` (placement: the offer's row,
    and a single-tenant provider's, already locked) the provider is locked before its
    devices are chosen; without it (an explanation) it is a snapshot."""
    if tenant_bound and _held_by_another_tenant(offer, job):
        return Room(
            Exclusion(
                TENANT_BUSY,
                f"{offer.provider.name} takes one organization's work at a time, and "
                "another organization's job runs there now.",
            )
        )
    used = (
        offer.attempts.filter(ended_at__isnull=True).aggregate(used=Sum("gpu_count"))["used"] or 0
    )
    if offer.capacity - used - held_for_others(offer, job) < wants.gpu_count:
        return Room(
            Exclusion(
                CAPACITY_FULL,
                f"It has {max(offer.capacity - used, 0)} of {offer.capacity} free, "
                f"not {wants.gpu_count}.",
            )
        )
    wants_gpus = wants.accelerator != "cpu" and wants.gpu_count > 0
    if not (wants_gpus and assigns_gpu_devices(offer.provider)):
        return Room(None)
    if lock and not tenant_bound:
        # Only once the offer fits, so a placement holds no host's lock while it moves
        # on to another offer (two could then wait on each other's hosts).
        Provider.objects.select_for_update(no_key=True).filter(pk=offer.provider_id).first()
    devices = free_gpu_devices(offer.provider_id, wants.gpu_count)
    if devices is None:
        return Room(
            Exclusion(CAPACITY_FULL, f"Its host has fewer than {wants.gpu_count} GPUs free.")
        )
    return Room(None, devices)


@dataclass(frozen=True)
class Considered:
    offer: Offer
    excluded: Exclusion | None


@dataclass(frozen=True)
class Explanation:
    """Every offer in the catalog and why it cannot take the job (None: it could), cheapest
    first; `chosen`, the one placement would take now; `summary`, one sentence."""

    summary: str
    chosen: Offer | None
    considered: list[Considered]


def explain(job) -> Explanation:
    """What placement would do with `job` (saved or not) now, offer by offer, by the rules
    placement itself applies (`rule_out`, `room_on`). Locks and writes nothing: a snapshot
    that a placement a moment later may contradict."""
    wants = Wants.of(job)
    offers = list(
        Offer.objects.select_related("provider", "accelerator").order_by(
            "price_per_gpu_hour_micros", "id"
        )
    )
    considered: list[Considered] = []
    chosen = None
    for offer in offers:
        excluded = rule_out(offer, wants)
        if excluded is None:
            room = room_on(
                offer, job, wants, tenant_bound=single_tenant(offer.provider), lock=False
            )
            excluded = room.excluded
        if excluded is None and chosen is None:
            chosen = offer
        considered.append(Considered(offer, excluded))
    return Explanation(_summary(wants, chosen, considered), chosen, considered)


def _summary(wants: Wants, chosen: Offer | None, considered: list[Considered]) -> str:
    asked = f"{wants.accelerator} x{wants.gpu_count}"
    if chosen is not None:
        return f"{chosen.provider.name} can take it now ({asked})."
    if not considered:
        return f"No provider offers anything yet, so nothing can run {asked}."
    nearest = max(
        (c for c in considered if c.excluded is not None),
        key=lambda c: EXCLUSION_CODES.index(c.excluded.code),
    )
    return f"No offer can take it now; the nearest, on {nearest.offer.provider.name}: " + (
        nearest.excluded.message
    )
