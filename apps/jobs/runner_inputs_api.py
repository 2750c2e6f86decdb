"""`GET jobs/<job id>/datasets/<dataset id>/download`: the uploaded dataset a fine-tune names,
for its runner to put in the workload's directory (`apps.jobs.job_inputs`).

The attempt's runner token fetches only the dataset its own job's config names; any other
(another dataset of the same project, another project's) is a 404, like a missing one.
The file streams from whichever storage holds it, with `X-Trainyard-SHA256` when known.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from apps.accounts.api_errors import error_body
from apps.core.stored_files import StoredFileMissing, stream_response
from apps.jobs import job_inputs
from apps.jobs.models import Attempt
from apps.jobs.runner_api import runner_endpoint


def _not_found(message: str = "Not found.") -> JsonResponse:
    return JsonResponse(error_body("not_found", message, None), status=404)


@require_GET
def download_dataset(request: HttpRequest, job_id: str, dataset_id: str) -> HttpResponse:
    @runner_endpoint
    def serve(request: HttpRequest, attempt: Attempt) -> HttpResponse:
        dataset = job_inputs.referenced_dataset(attempt.job)
        if dataset is None or dataset.public_id != dataset_id:
            return _not_found()
        headers = {"X-Trainyard-SHA256": dataset.sha256} if dataset.sha256 else {}
        try:
            return stream_response(
                dataset.file.name,
                size=dataset.size_bytes,
                content_type="application/octet-stream",
                headers=headers,
            )
        except StoredFileMissing:
            return _not_found("The dataset's file is gone.")

    return serve(request, job_id)
