"""A job's whole log as plain text, one message a line, oldest first (or one source's
lines), streamed as it is read — chunks of `log_archive.CHUNK_LINES` by id, so memory stays
flat however long the log — and gzip-compressed when the client accepts it
(`Accept-Encoding: gzip`). Served by the API's `logs.txt` and the job page's *Download log*,
each scoping the job to the caller's organization first.

An ended job's whole log (no source) comes from its archive when it has a current one
(`apps.jobs.telemetry.log_archive`): one gzip file written once after the job ended, with
the same bytes the database would give. It goes out as it is stored when gzip is accepted,
and is decompressed on the fly otherwise. A running job, one source, and an ended job whose
archive is missing, stale (a line came after it) or whose file is gone are read from the
database as before; for an ended job that also asks for the archive to be built again.

Lines are the stored messages (masked at ingestion), without timestamps or streams: what
the workload printed, as `tail` would show it. The JSON pages (`/logs`) carry the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import IO

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse

from apps.jobs.models import Job
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


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header admits gzip (q=0 refuses it)."""
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def log_text_response(request: HttpRequest, job: Job, source: str | None) -> StreamingHttpResponse:
    """The job's log (one `source`, or both when None) as a streamed plain-text response,
    gzipped when the client accepts it. `source` is checked by the caller."""
    gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
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
