"""`POST jobs/<job id>/logs`: a batch of the workload's log lines (docs/runner-protocol.md),
stored once per sequence number, so a batch sent twice is counted once. A batch marked
`follows: N` was sent while the batch ending at seq N may still be in flight: it waits
(briefly) for that one to be stored first, so ids usually keep the order of seqs; readers
never rely on it (they read in `LogLine` log order, attempt then seq). A batch served
counts as the runner's heartbeat (`reports.runner_heard`), and its answer carries the
runner's order as a heartbeat's does, so a runner that is sending batches need not also send
heartbeats."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from apps.jobs.execution import reports
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import json_body, runner_endpoint
from apps.jobs.telemetry import ingestion


@require_POST
@runner_endpoint
def logs(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    payload = json_body(request)
    lines = ingestion.parse_batch(payload)
    follows = ingestion.parse_follows(payload)
    if follows is not None:
        ingestion.wait_for_predecessor(job_id=attempt.job_id, attempt=attempt.number, seq=follows)
    result = ingestion.ingest(attempt=attempt, job=attempt.job, lines=lines)
    reports.runner_heard(attempt)  # a stored batch is a heartbeat too
    return JsonResponse(
        {
            "accepted": result.accepted,
            "duplicates": result.duplicates,
            "order": reports.order_for(attempt.job, attempt),
            **reports.shell_hint(attempt),
        }
    )
