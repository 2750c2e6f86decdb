"""The job's code archive on the runner side (docs/runner-protocol.md, "The working
directory"):

- `spec_workdir(job)`: the spec's `workdir` (id, format, download URL, SHA-256, size) for
  the archive the job's `container.workdir` names, or None when it names none;
- `GET jobs/<job id>/workdirs/<wd id>/download`: the stored archive, streamed, to a runner
  of that job only, and only the archive its job names (any other id is a 404).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from apps.core.stored_files import StoredFileMissing, stream_response
from apps.jobs.models import Attempt, Job
from apps.jobs.runner_api.auth import not_found, runner_endpoint
from apps.workdirs.models import Workdir
from runner import protocol

CONTENT_TYPES = {"tar.gz": "application/gzip", "zip": "application/zip"}


def job_workdir_id(job: Job) -> str | None:
    return (job.spec.get("container") or {}).get("workdir") or None


def job_workdir(job: Job) -> Workdir | None:
    """The archive the job names, if it is (still) one of the job's organization."""
    workdir_id = job_workdir_id(job)
    if workdir_id is None:
        return None
    return Workdir.objects.filter(organization_id=job.organization_id, public_id=workdir_id).first()


def spec_workdir(workdir: Workdir, job: Job) -> protocol.WorkdirArchive:
    return {
        "id": workdir.public_id,
        "format": workdir.archive_format,
        "download_url": reverse(
            "runner-workdir-download",
            kwargs={"job_id": job.public_id, "workdir_id": workdir.public_id},
        ),
        "sha256": workdir.sha256,
        "size_bytes": workdir.size_bytes,
    }


@require_GET
@runner_endpoint
def download(request: HttpRequest, attempt: Attempt, workdir_id: str) -> HttpResponse:
    job = attempt.job
    if job_workdir_id(job) != workdir_id:
        return not_found()
    workdir = job_workdir(job)
    if workdir is None:
        return not_found()
    try:
        return stream_response(
            workdir.file.name,
            size=workdir.size_bytes,
            content_type=CONTENT_TYPES.get(workdir.archive_format, "application/octet-stream"),
            headers={protocol.SHA256_HEADER: workdir.sha256},
        )
    except StoredFileMissing:
        return not_found("The archive's file is gone.")
