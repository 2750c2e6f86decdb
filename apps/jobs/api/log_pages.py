"""A JSON page of log lines rendered straight from database rows.

A page may hold `LOG_MAX_LIMIT` lines: a client reading a whole log through the cursor API
(the CLI, a notebook, a generated SDK) should need few round trips. A serializer per row
cost more than the query itself at that size, so the rows come as tuples
(`selectors.LOG_PAGE_FIELDS`) and go out through orjson, shaped exactly as the `LogPage`
schema says (and as `LogLineOut` would render them: `log_<id>`, timestamps in RFC 3339 with
`Z`). The body is gzip-compressed when the client accepts it and it is worth it.
"""

from __future__ import annotations

from datetime import datetime

import orjson
from django.http import HttpResponse

from apps.jobs.telemetry.log_archive import gzip_compressor
from apps.jobs.telemetry.log_text import accepts_gzip

# Log pages go bigger than other lists (a whole log in few round trips); `logs.txt`
# streams it all in one.
LOG_MAX_LIMIT = 10_000
# Below this a body is sent as it is: compressing it would save less than it costs.
GZIP_MIN_BYTES = 4096


def _stamp(value: str | datetime) -> str | datetime:
    """A timestamp as `isoformat` writes it: no fraction when it has no microseconds."""
    if isinstance(value, str) and value.endswith(".000000Z"):
        return value[:-8] + "Z"
    return value  # a datetime: orjson writes it so


def log_page_body(rows: list[tuple], next_cursor: str | None, total: int) -> bytes:
    """The page as JSON bytes; `rows` are (id, timestamp, source, stream, message, attempt),
    the timestamp a datetime or its RFC 3339 text (`selectors.log_page`)."""
    data = [
        {
            "id": f"log_{line_id}",
            "timestamp": _stamp(timestamp),
            "source": source,
            "stream": stream,
            "message": message,
            "attempt": attempt,
        }
        for line_id, timestamp, source, stream, message, attempt in rows
    ]
    page = {"data": data, "next_cursor": next_cursor, "total": total}
    return orjson.dumps(page, option=orjson.OPT_UTC_Z)


def log_page_response(request, body: bytes) -> HttpResponse:
    """The page's response, gzipped when asked for and large enough to gain from it."""
    response = HttpResponse(content_type="application/json")
    response["Vary"] = "Accept-Encoding"
    if len(body) >= GZIP_MIN_BYTES and accepts_gzip(request.headers.get("Accept-Encoding", "")):
        compressor = gzip_compressor()
        body = compressor.compress(body) + compressor.flush()
        response["Content-Encoding"] = "gzip"
    response.content = body
    return response
