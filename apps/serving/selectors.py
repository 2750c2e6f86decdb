"""Reads for endpoints: the state a person sees, and usage by key and day."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import date, datetime, timedelta

from django.db.models import QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.accounts.models import Organization
from apps.jobs.states import JobState
from apps.serving import engine_client
from apps.serving.engine_client import EngineAddress
from apps.serving.models import Endpoint, EndpointRequest, EndpointRevision


def endpoints_for_org(organization: Organization) -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(organization=organization).select_related(
        "project", "job", "current_revision", "previous_revision"
    )


def endpoint_for_org(organization: Organization, public_id: str) -> Endpoint | None:
    return endpoints_for_org(organization).filter(public_id=public_id).first()


def endpoint_state(endpoint: Endpoint) -> str:
    """What the endpoint is doing now: `stopped`; `failed` when its serve job ended without
    being stopped; `ready` when its engine runs with the current revision loaded; else
    `starting` (placing, loading, or coming back after a preemption)."""
    if endpoint.state == Endpoint.State.STOPPED:
        return Endpoint.State.STOPPED
    job = endpoint.job
    if job is None or job.is_terminal:
        return Endpoint.State.FAILED
    current = endpoint.current_revision
    if (
        job.state == JobState.RUNNING
        and current is not None
        and current.loaded_on_attempt == job.attempt_count
    ):
        return Endpoint.State.READY
    return Endpoint.State.STARTING


def endpoint_engine(endpoint: Endpoint) -> tuple[EngineAddress, EndpointRevision] | None:
    """The endpoint's running engine and its current revision, when that revision is loaded
    there (what a request to the endpoint would use now); else None."""
    if endpoint.state == Endpoint.State.STOPPED or endpoint.current_revision is None:
        return None
    address = engine_client.address_for(endpoint.job)
    revision = endpoint.current_revision
    if address is None or revision.loaded_on_attempt != address.attempt:
        return None
    return address, revision


def percentile(sorted_values: list[int], fraction: float) -> int | None:
    """The nearest-rank percentile of already sorted values (None for none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def usage_by_key_and_day(endpoint: Endpoint, *, since: datetime) -> list[dict]:
    """Per (UTC day, API key): requests, prompt and completion tokens, errors, and latency
    percentiles (p50, p95, in ms), oldest day first. Requests from the dashboard (the
    Playground) have no key and are listed as `key: null`."""
    rows = (
        EndpointRequest.objects.filter(endpoint=endpoint, started_at__gte=since)
        .annotate(day=TruncDate("started_at"))
        .values_list(
            "day",
            "api_key__prefix",
            "status_code",
            "prompt_tokens",
            "completion_tokens",
            "latency_ms",
        )
        .order_by("day", "api_key__prefix")
    )
    groups: dict[tuple[date, str | None], dict] = {}
    latencies: dict[tuple[date, str | None], list[int]] = defaultdict(list)
    for day, prefix, status_code, prompt, completion, latency in rows.iterator():
        group = groups.setdefault(
            (day, prefix),
            {
                "day": day.isoformat(),
                "key": prefix,
                "requests": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "errors": 0,
            },
        )
        group["requests"] += 1
        group["prompt_tokens"] += prompt
        group["completion_tokens"] += completion
        group["errors"] += status_code >= 400
        latencies[(day, prefix)].append(latency)
    for slot, group in groups.items():
        values = sorted(latencies[slot])
        group["latency_p50_ms"] = percentile(values, 0.50)
        group["latency_p95_ms"] = percentile(values, 0.95)
    return list(groups.values())


def default_usage_since(days: int = 30) -> datetime:
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days - 1)
