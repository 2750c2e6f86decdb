"""`GET /api/v1/compute/jobs/{id}/logs.txt`: a job's whole log as plain text, one message a
line, oldest first (`?source=user|system` for one source), streamed as it is read — chunks
of `log_archive.CHUNK_LINES` by id, so memory stays flat however long the log — and
gzip-compressed when the client accepts it (`Accept-Encoding: gzip`). The same organization
scoping and keys as every compute endpoint; another organization's job is a 404.

An ended job's whole log (no `?source`) comes from its archive when it has a current one
(`apps.jobs.telemetry.log_archive`): one gzip file written once after the job ended, with
the same bytes the database would give. It goes out as it is stored when gzip is accepted,
and is decompressed on the fly otherwise. A running job, `?source=`, and an ended job whose
archive is missing, stale (a line came after it) or whose file is gone are read from the
database as before; for an ended job that also asks for the archive to be built again.

Lines are the stored messages (masked at ingestion), without timestamps or streams: what
the workload printed, as `tail` would show it. The JSON pages (`/logs`) carry the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import IO

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.errors import InvalidRequest
from apps.jobs import selectors
from apps.jobs.models import Job, LogLine
from apps.jobs.telemetry import log_archive


async def _lines(job_id: int, source: str | None) -> AsyncIterator[bytes]:
    after = None
    while True:
        chunk = await sync_to_async(log_archive.read_chunk)(job_id, source, after)
        if not chunk.body:
            return
        after = chunk.after
        yield chunk.body


async def _gzipped(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    compressor = log_archive.gzip_compressor()
    async for chunk in chunks:
        packed = compressor.compress(chunk)
        if packed:
            yield packed
    yield compressor.flush()


async def _archived(stream: IO[bytes], *, decompress: bool) -> AsyncIterator[bytes]:
    blocks = log_archive.read_blocks(stream, decompress=decompress)
    try:
        while block := await sync_to_async(next)(blocks, b""):
            yield block
    finally:
        await sync_to_async(stream.close)()


def _from_archive(job: Job, gzip: bool) -> tuple[IO[bytes], AsyncIterator[bytes]] | None:
    """The ended job's archive as the body, when it has a current one whose file is there;
    else None (and the archive is asked for again)."""
    if not job.is_terminal:
        return None
    name = log_archive.current_archive(job)
    stream = log_archive.open_archive(name) if name else None
    if stream is None:
        log_archive.request_build(job.pk)
        return None
    return stream, _archived(stream, decompress=not gzip)


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


class JobLogTextView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR)},
        parameters=[OpenApiParameter("source", OpenApiTypes.STR, enum=["user", "system"])],
        summary="A job's whole log as plain text, streamed (gzip when accepted)",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        source = request.query_params.get("source") or None
        if source is not None and source not in LogLine.Source.values:
            raise InvalidRequest("source must be user or system.", param="source")
        gzip = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        response = StreamingHttpResponse(content_type="text/plain; charset=utf-8")
        archived = _from_archive(job, gzip) if source is None else None
        if archived is not None:
            stream, body = archived
            response._resource_closers.append(stream.close)  # also when never iterated
        else:
            body = _lines(job.pk, source)
            if gzip:
                body = _gzipped(body)
        if gzip:
            response["Content-Encoding"] = "gzip"
        response.streaming_content = body
        response["Vary"] = "Accept-Encoding"
        response["Content-Disposition"] = f'inline; filename="{job.public_id}.log"'
        response["X-Trainyard-Log-Lines"] = str(
            {"user": job.user_log_lines, "system": job.system_log_lines}.get(
                source, job.user_log_lines + job.system_log_lines
            )
        )
        return response
