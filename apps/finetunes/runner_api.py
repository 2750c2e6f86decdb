"""`GET jobs/<job id>/datasets/<dataset id>/download`: the uploaded dataset a fine-tune names,
for its runner to put in the workload's directory (`apps.finetunes.inputs`).

The attempt's runner token fetches only the dataset its own job's config names; any other
(another dataset of the same project, another project's) is a 404, like a missing one.
The file streams from whichever storage holds it, with `X-Trainyard-SHA256` when known.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from apps.core.stored_files import StoredFileMissing, stream_response
from apps.finetunes import inputs
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import not_found, runner_endpoint
from runner import protocol


@require_GET
@runner_endpoint
def download_dataset(request: HttpRequest, attempt: Attempt, dataset_id: str) -> HttpResponse:
    dataset = inputs.referenced_dataset(attempt.job)
    if dataset is None or dataset.public_id != dataset_id:
        return not_found()
    headers = {protocol.SHA256_HEADER: dataset.sha256} if dataset.sha256 else {}
    try:
        return stream_response(
            dataset.file.name,
            size=dataset.size_bytes,
            content_type="application/octet-stream",
            headers=headers,
        )
    except StoredFileMissing:
        return not_found("The dataset's file is gone.")
