"""Serving stored artifacts (checkpoints, adapters) to people: the page and the API."""

from __future__ import annotations

from django.core.files.storage import default_storage
from django.http import FileResponse, Http404

from apps.jobs.models import Artifact, Job


def artifact_filename(artifact: Artifact, job: Job) -> str:
    step = artifact.step if artifact.step is not None else "final"
    return f"{job.public_id}-attempt{artifact.attempt}-{artifact.kind}-{step}.tar.gz"


def artifact_response(artifact: Artifact, job: Job) -> FileResponse:
    """Stream the stored tar.gz; the SHA-256 goes along so a client can check it."""
    try:
        handle = default_storage.open(artifact.storage_path, "rb")
    except FileNotFoundError as exc:
        raise Http404("The artifact's file is gone.") from exc
    response = FileResponse(
        handle,
        as_attachment=True,
        filename=artifact_filename(artifact, job),
        content_type="application/gzip",
    )
    response["X-Trainyard-SHA256"] = artifact.sha256
    return response
