"""What the endpoint pages show, as data for templates, and the live parts of the detail
page as rendered partials: the state and current-revision block, the revisions table and
the promotions history are named partials of `serving/detail.html` (django-template-partials),
rendered by the first page load and again, out of band, for each push
(`apps.serving.consumers`), so a reload and a push can never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import QuerySet
from django.db.models.functions import TruncDate
from django.template.loader import render_to_string

from apps.finetunes import payloads as finetune_payloads
from apps.jobs.artifacts.store import public_artifact_id
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from apps.serving import selectors
from apps.serving.models import Endpoint, EndpointRequest

USAGE_DAYS = 30
PROMOTIONS_SHOWN = 100
# Swap targets come from this many of the organization's newest succeeded fine-tunes.
TARGET_JOBS = 50

DETAIL = "serving/detail.html"
LIVE_PARTIALS = ("endpoint-status", "endpoint-revisions", "endpoint-promotions")


def endpoints_for_list(organization) -> QuerySet[Endpoint]:
    """The organization's endpoints, newest first, with what each row shows. Not paged: an
    organization runs a handful of endpoints, each a billed serve job."""
    return selectors.endpoints_for_org(organization).select_related(
        "current_revision__artifact__job", "current_revision__hub_commit"
    )


def endpoint_for_page(organization, public_id: str) -> Endpoint | None:
    return (
        selectors.endpoints_for_org(organization)
        .select_related(
            "organization",
            "created_by",
            "current_revision__artifact__job",
            "current_revision__hub_commit",
            "previous_revision__artifact__job",
            "previous_revision__hub_commit",
        )
        .filter(public_id=public_id)
        .first()
    )


def can_roll_back(endpoint: Endpoint) -> bool:
    """Whether the page offers Rollback: a previous revision exists and the endpoint runs.
    The service has the last word (the previous one must still be loaded)."""
    return endpoint.previous_revision_id is not None and endpoint.state != Endpoint.State.STOPPED


def live_context(endpoint: Endpoint) -> dict:
    """What the live partials need (the page's first render uses the same)."""
    revisions = endpoint.revisions.select_related(
        "artifact__job", "hub_commit", "created_by", "created_by_key"
    ).order_by("-number")
    promotions = endpoint.promotions.select_related(
        "revision", "replaced", "by_user", "by_key"
    ).order_by("-at", "-id")[:PROMOTIONS_SHOWN]
    return {
        "org": endpoint.organization,
        "endpoint": endpoint,
        "state": selectors.endpoint_state(endpoint),
        "current": endpoint.current_revision,
        "previous": endpoint.previous_revision,
        "can_rollback": can_roll_back(endpoint),
        "revisions": list(revisions),
        "promotions": list(promotions),
    }


def render_changed(endpoint_id: int) -> str:
    """The live partials as out-of-band swaps, for one `endpoint.changed` ('' when the
    endpoint is gone)."""
    endpoint = (
        Endpoint.objects.select_related(
            "organization",
            "project",
            "job",
            "current_revision__artifact__job",
            "previous_revision__artifact__job",
        )
        .filter(pk=endpoint_id)
        .first()
    )
    if endpoint is None:
        return ""
    context = {**live_context(endpoint), "oob": True}
    return "".join(render_to_string(f"{DETAIL}#{name}", context).strip() for name in LIVE_PARTIALS)


# -- swap targets --------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One artifact the swap form offers."""

    artifact: Artifact
    current: bool

    @property
    def value(self) -> str:
        return public_artifact_id(self.artifact)

    @property
    def label(self) -> str:
        artifact = self.artifact
        what = (
            "final adapter"
            if artifact.kind == Artifact.Kind.ADAPTER
            else f"checkpoint step {artifact.step}"
        )
        attempt = f", attempt {artifact.attempt}" if artifact.attempt > 1 else ""
        return f"{artifact.job.name} · {what}{attempt}"


def _trained_on(job: Job) -> str | None:
    model = (finetune_payloads.config_of(job) or {}).get("model")
    return model.strip() if isinstance(model, str) else None


def swap_targets(endpoint: Endpoint) -> list[Target]:
    """The final adapters and checkpoints of the organization's succeeded fine-tunes on the
    endpoint's base model: newest job first, its final adapter before its checkpoints
    (newest step first). The base model lives in each job's trainer config, so the match is
    made here over the newest `TARGET_JOBS` jobs rather than in SQL."""
    jobs = (
        Job.objects.for_org(endpoint.organization)
        .filter(kind=Job.Kind.FINETUNE, state=JobState.SUCCEEDED)
        .order_by("-created_at", "-id")[:TARGET_JOBS]
    )
    base = endpoint.base_model.strip()
    matching = [job for job in jobs if _trained_on(job) == base]
    order = {job.pk: n for n, job in enumerate(matching)}
    artifacts = (
        Artifact.objects.filter(job__in=matching)
        .exclude(kind=Artifact.Kind.MERGED)  # a whole model, not an adapter
        .select_related("job")
    )
    current = endpoint.current_revision.artifact_id if endpoint.current_revision else None
    ranked = sorted(
        artifacts,
        key=lambda a: (
            order[a.job_id],
            a.kind != Artifact.Kind.ADAPTER,
            -a.attempt,
            -(a.step or 0),
        ),
    )
    return [Target(artifact, artifact.pk == current) for artifact in ranked]


# -- usage ---------------------------------------------------------------------------------


def _day(value) -> date:
    return value if isinstance(value, date) and not isinstance(value, datetime) else value.date()


def _latency_by_day(endpoint: Endpoint, since: datetime) -> dict[date, tuple[int, int]]:
    """p50 and p95 latency (ms) per UTC day over every key together. Percentiles do not
    add up across keys, so this is its own pass over the same rows the per-key table
    reads; only `latency_ms` travels."""
    values: dict[date, list[int]] = {}
    rows = (
        EndpointRequest.objects.filter(endpoint=endpoint, started_at__gte=since)
        .annotate(day=TruncDate("started_at"))
        .values_list("day", "latency_ms")
    )
    for day, latency in rows.iterator():
        values.setdefault(_day(day), []).append(latency)
    result = {}
    for day, latencies in values.items():
        latencies.sort()
        result[day] = (selectors.percentile(latencies, 0.50), selectors.percentile(latencies, 0.95))
    return result


def usage(endpoint: Endpoint, days: int = USAGE_DAYS) -> dict:
    """The last `days` UTC days: `rows` per key and day (newest day first) for the table,
    and `chart` for uPlot (`x`: each day's midnight in epoch seconds; `requests`; `p50`,
    `p95` in ms, null on days without requests)."""
    since = selectors.default_usage_since(days)
    rows = selectors.usage_by_key_and_day(endpoint, since=since)
    first = since.astimezone(UTC).date()
    axis = [first + timedelta(days=n) for n in range(days)]
    index = {day: n for n, day in enumerate(axis)}
    requests = [0] * days
    for row in rows:
        n = index.get(date.fromisoformat(row["day"]))
        if n is not None:
            requests[n] += row["requests"]
    latency = _latency_by_day(endpoint, since)
    return {
        "rows": list(reversed(rows)),
        "total_requests": sum(requests),
        "chart": {
            "x": [int(datetime.combine(day, time(), tzinfo=UTC).timestamp()) for day in axis],
            "requests": requests,
            "p50": [latency.get(day, (None, None))[0] for day in axis],
            "p95": [latency.get(day, (None, None))[1] for day in axis],
        },
    }
