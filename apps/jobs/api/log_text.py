"""`GET /api/v1/compute/jobs/{id}/logs.txt`: a job's whole log as plain text, one message a
line, oldest first (`?source=user|system` for one source), streamed as it is read — chunks
of `CHUNK_LINES` by id, so memory stays flat however long the log — and gzip-compressed
when the client accepts it (`Accept-Encoding: gzip`). The same organization scoping and
keys as every compute endpoint; another organization's job is a 404.

Lines are the stored messages (masked at ingestion), without timestamps or streams: what
the workload printed, as `tail` would show it. The JSON pages (`/logs`) carry the rest.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.errors import InvalidRequest
from apps.jobs import selectors
from apps.jobs.models import LogLine

CHUNK_LINES = 50_000


def _chunk(job_id: int, source: str | None, after_id: int) -> tuple[int, bytes]:
    """The next CHUNK_LINES messages after `after_id`, joined by PostgreSQL itself (one
    string per chunk rather than a row object per line). SQLite joins them here."""
    if connection.vendor != "postgresql":
        lines = LogLine.objects.filter(job_id=job_id, id__gt=after_id)
        if source:
            lines = lines.filter(source=source)
        rows = list(lines.order_by("id").values_list("id", "message")[:CHUNK_LINES])
        if not rows:
            return after_id, b""
        return rows[-1][0], ("\n".join(m for _, m in rows) + "\n").encode()
    table = LogLine._meta.db_table
    where = "job_id = %s AND id > %s" + (" AND source = %s" if source else "")
    params = [job_id, after_id, *([source] if source else []), CHUNK_LINES]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT max(id), string_agg(message, E'\\n' ORDER BY id) FROM "
            f"(SELECT id, message FROM {table} WHERE {where} ORDER BY id LIMIT %s) AS chunk",
            params,
        )
        last_id, text = cursor.fetchone()
    if last_id is None:
        return after_id, b""
    return last_id, (text + "\n").encode("utf-8", "replace")


async def _lines(job_id: int, source: str | None) -> AsyncIterator[bytes]:
    after_id = 0
    while True:
        after_id, body = await sync_to_async(_chunk)(job_id, source, after_id)
        if not body:
            return
        yield body


async def _gzipped(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    # Level 1: logs compress well even so, and the stream is not held up by the CPU.
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    async for chunk in chunks:
        packed = compressor.compress(chunk)
        if packed:
            yield packed
    yield compressor.flush()


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
        body = _lines(job.pk, source)
        response = StreamingHttpResponse(content_type="text/plain; charset=utf-8")
        if _accepts_gzip(request.headers.get("Accept-Encoding", "")):
            body = _gzipped(body)
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
