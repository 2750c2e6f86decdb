"""The runner's artifact endpoints (docs/runner-protocol.md, "Artifacts and resume"):

- `POST jobs/<job id>/artifacts?kind=checkpoint|adapter&step=<n or empty>`: the body is the
  raw tar.gz (`Content-Type: application/gzip`), `X-Trainyard-SHA256` its hex digest. 201
  `{"id", "sha256", "size_bytes"}` when stored, 200 with the stored one on a repeat, 400 on a
  bad query or a digest that does not match, 413 `payload_too_large` past
  ARTIFACT_MAX_BYTES (nothing is stored then; the job's events and log say so).
- `GET jobs/<job id>/artifacts/<artifact pk>/download`: the stored tar.gz of one of the job's
  artifacts (another job's is a 404), for a runner resuming from a checkpoint.

The body is read with `request.read()` in chunks and never through `request.body`: that
would hold a checkpoint of gigabytes in memory, and Django refuses it past
DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) anyway. Under ASGI Django has already spooled the body
to a temporary file (in memory only up to FILE_UPLOAD_MAX_MEMORY_SIZE), so memory stays
bounded end to end. The size limit is checked twice: an announced Content-Length over it is
refused before a byte is read, and `store.artifact_store` counts what streams in (a
chunked body announces nothing).

Any attempt of the job may upload, not only the current one: a late checkpoint of a
preempted attempt is still the newest progress the job made.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from apps.core.errors import InvalidRequest
from apps.core.stored_files import StoredFileMissing, stream_response
from apps.jobs.artifacts import store
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import not_found, runner_endpoint
from runner import protocol


def _step_param(request: HttpRequest) -> int | None:
    raw = request.GET.get("step", "").strip()
    if raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()):  # "²".isdigit() is True, and int() refuses it
        raise InvalidRequest("step must be a whole number of at least 0.", param="step")
    return int(raw)


def _announced_length(request: HttpRequest) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


def _out(artifact) -> dict:
    return {
        "id": store.public_artifact_id(artifact),
        "sha256": artifact.sha256,
        "size_bytes": artifact.size_bytes,
    }


@require_POST
@runner_endpoint
def upload(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    kind = request.GET.get("kind", "")
    step = _step_param(request)
    sha256 = request.headers.get(protocol.SHA256_HEADER, "").strip().lower()
    # Checked here too, so a repeat is recognised before the body is read.
    store.validate_artifact_key(kind=kind, step=step, sha256=sha256)
    existing = store.artifact_find(attempt=attempt, kind=kind, step=step)
    if existing is not None:
        return JsonResponse(_out(existing), status=200)
    announced = _announced_length(request)
    if announced is not None and announced > store.artifact_max_bytes():
        raise store.artifact_refuse(attempt=attempt, kind=kind, step=step, size=announced)
    # Two identical uploads racing each other may both be answered 201, with the same id.
    stored = store.artifact_store(
        attempt=attempt,
        kind=kind,
        step=step,
        fileobj=request,
        sha256=sha256,
        announced=announced,
    )
    return JsonResponse(_out(stored), status=201)


@require_GET
@runner_endpoint
def download(request: HttpRequest, attempt: Attempt, artifact_id: int) -> HttpResponse:
    artifact = store.artifact_for_job(attempt.job, artifact_id)
    if artifact is None:
        return not_found()
    try:
        return stream_response(
            artifact.storage_path,
            size=artifact.size_bytes,
            content_type=protocol.ARTIFACT_CONTENT_TYPE,
            headers={protocol.SHA256_HEADER: artifact.sha256},
        )
    except StoredFileMissing:
        return not_found("The artifact's file is gone.")
