"""`POST jobs/<job id>/logs`: a batch of the workload's log lines (docs/runner-protocol.md),
stored once per sequence number, so a batch sent twice is counted once."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import json_body, runner_endpoint
from apps.jobs.telemetry import ingestion


@require_POST
@runner_endpoint
def logs(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    lines = ingestion.parse_batch(json_body(request))
    result = ingestion.ingest(attempt=attempt, job=attempt.job, lines=lines)
    return JsonResponse({"accepted": result.accepted, "duplicates": result.duplicates})
