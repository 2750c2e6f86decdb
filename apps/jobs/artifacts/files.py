"""Serving stored artifacts (checkpoints, adapters) to people: the page and the API."""

from __future__ import annotations

from django.http import FileResponse, Http404

from apps.core.stored_files import StoredFileMissing, stream_response
from apps.jobs.models import Artifact, Job
from runner import protocol


def artifact_filename(artifact: Artifact, job: Job) -> str:
    step = artifact.step if artifact.step is not None else "final"
    return f"{job.public_id}-attempt{artifact.attempt}-{artifact.kind}-{step}.tar.gz"


def artifact_response(artifact: Artifact, job: Job) -> FileResponse:
    """Stream the stored tar.gz from whichever storage holds it; the SHA-256 goes along so a
    client can check it."""
    try:
        return stream_response(
            artifact.storage_path,
            size=artifact.size_bytes,
            content_type="application/gzip",
            filename=artifact_filename(artifact, job),
            headers={protocol.SHA256_HEADER: artifact.sha256},
        )
    except StoredFileMissing as exc:
        raise Http404("The artifact's file is gone.") from exc
