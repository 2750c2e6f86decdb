"""What a delivery says: the envelope of an event, built when it happens, and the body a
webhook of either format is sent.

Envelope: `{"id", "type", "created", "organization": {"slug", "name"}, "data"}`. The id is
derived from what happened (the job and the state it reached, the budget notice, the
endpoint's revision), so the same event told twice has the same id and is delivered once
per webhook. `data` per type is in `docs/webhooks.md`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from apps.accounts.models import Organization
from apps.billing.models import BudgetNotice
from apps.core.money import format_usd
from apps.jobs.models import Job
from apps.serving.models import Endpoint, EndpointRevision
from apps.webhooks.events import PING, EventType


def event_id(key: str) -> str:
    """A stable id for the event named by `key` (`evt_` and 24 hex digits)."""
    return "evt_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def envelope(
    *, organization: Organization, type: str, id: str, created: datetime, data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": id,
        "type": type,
        "created": created.isoformat().replace("+00:00", "Z"),
        "organization": {"slug": organization.slug, "name": organization.name},
        "data": data,
    }


def _page(name: str, **kwargs: str) -> str:
    return settings.TRAINYARD_PUBLIC_URL.rstrip("/") + reverse(name, kwargs=kwargs)


def job_data(job: Job, state: str) -> dict[str, Any]:
    return {
        "job": {
            "id": job.public_id,
            "name": job.name,
            "kind": job.kind,
            "state": state,
            "reason": job.reason,
            "project": job.project.slug if job.project_id else None,
            "attempt": job.attempt_count,
            "url": _page("job-detail", org_slug=job.organization.slug, job_id=job.public_id),
        }
    }


def budget_data(notice: BudgetNotice) -> dict[str, Any]:
    budget = notice.budget
    return {
        "budget": {
            "id": budget.public_id,
            "name": budget.name,
            "project": budget.project.slug if budget.project_id else None,
            "period": budget.period,
            "action": budget.action,
            "period_start": notice.period_start.isoformat().replace("+00:00", "Z"),
        },
        "threshold": notice.threshold,
        "spent_micros": notice.spent_micros,
        "limit_micros": notice.limit_micros,
        "url": _page("billing-page", org_slug=notice.organization.slug),
    }


def endpoint_data(
    endpoint: Endpoint, revision: EndpointRevision | None, message: str = ""
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "endpoint": {
            "id": endpoint.public_id,
            "name": endpoint.name,
            "base_model": endpoint.base_model,
            "url": _page(
                "endpoint-detail",
                org_slug=endpoint.organization.slug,
                endpoint_id=endpoint.public_id,
            ),
        },
        "revision": (
            {"number": revision.number, "served_name": revision.served_name} if revision else None
        ),
    }
    if message:
        data["message"] = message
    return data


def summary(payload: dict[str, Any]) -> str:
    """One line for people (the Slack format's `text`)."""
    kind, data = payload["type"], payload["data"]
    org = payload["organization"]["name"]
    if kind.startswith("job."):
        job = data["job"]
        reason = f" ({job['reason']})" if job.get("reason") else ""
        return f"[{org}] Job {job['name'] or job['id']} {job['state']}{reason}: {job['url']}"
    if kind == EventType.BUDGET_THRESHOLD:
        name = data["budget"]["name"] or data["budget"]["id"]
        return (
            f"[{org}] Budget {name} reached {data['threshold']}%: "
            f"{format_usd(data['spent_micros'])} of {format_usd(data['limit_micros'])} "
            f"this {data['budget']['period']}: {data['url']}"
        )
    if kind.startswith("endpoint."):
        endpoint = data["endpoint"]
        revision = data.get("revision") or {}
        what = "is live on" if kind == EventType.ENDPOINT_READY else "failed on"
        served = revision.get("served_name", "its engine")
        tail = f" — {data['message']}" if data.get("message") else ""
        return f"[{org}] Endpoint {endpoint['name']} {what} {served}{tail}: {endpoint['url']}"
    if kind == PING:
        return f"[{org}] Test delivery from Trainyard: this webhook works."
    return f"[{org}] {kind}"


def body_bytes(payload: dict[str, Any], format: str) -> bytes:
    """The exact bytes sent (and signed) for a webhook of `format`."""
    body = {"text": summary(payload)} if format == "slack" else payload
    return json.dumps(body, separators=(",", ":"), sort_keys=False).encode()
