"""`/hf/[datasets/]<ns>/<name>/resolve/<revision>/<path>`: a file of a revision, as the Hugging
Face client downloads it.

The client first asks with HEAD (with `Accept-Encoding: identity`) and reads: `X-Repo-Commit`
(the commit the revision resolved to: the snapshot folder it caches under), `ETag` (the
cached blob's name; the file's git blob id, which is also its `oid` in tree listings) and
`Content-Length` (the file's size). Then it GETs the bytes, with `Range: bytes=<n>-` when it
resumes a partial download. A missing file is 404 with `X-Error-Code: EntryNotFound` and
still carries `X-Repo-Commit`, which the client caches as "not there at this commit".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from typing import IO

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_http_methods

from apps.core.stored_files import StoredFileMissing
from apps.hub import repos
from apps.hub.access import hub_error, hub_view, repo_for, require_caller
from apps.hub.blobs import open_blob
from apps.hub.errors import EntryNotFound
from apps.hub.models import HubBlob, HubFile, RepoKind

RANGE_RE = re.compile(r"bytes=(\d*)-(\d*)")
CHUNK_BYTES = 1024 * 1024


def _chunks(stream: IO[bytes], length: int) -> Iterator[bytes]:
    with closing(stream):
        left = length
        while left > 0:
            data = stream.read(min(CHUNK_BYTES, left))
            if not data:
                return
            left -= len(data)
            yield data


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `Range` the file can satisfy; None for no range.
    Raises ValueError for one it cannot."""
    if not header:
        return None
    match = RANGE_RE.fullmatch(header.strip())
    if match is None or not (match[1] or match[2]):
        return None  # not a form we serve: the whole file, as RFC 9110 allows
    if match[1]:
        first = int(match[1])
        last = min(int(match[2]), size - 1) if match[2] else size - 1
    else:  # the last n bytes
        first, last = max(0, size - int(match[2])), size - 1
    if first >= size or first > last:
        raise ValueError(header)
    return first, last


def _file_headers(response: HttpResponse, blob: HubBlob, commit_oid: str, path: str) -> None:
    response["X-Repo-Commit"] = commit_oid
    response["ETag"] = f'"{blob.git_oid}"'
    response["Accept-Ranges"] = "bytes"
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=path.rsplit("/", 1)[-1]
    )


@hub_view
@require_http_methods(["GET", "HEAD"])
def resolve(
    request: HttpRequest,
    namespace: str,
    name: str,
    revision: str,
    path: str,
    kind: str = RepoKind.MODEL,
) -> HttpResponse:
    caller = require_caller(request)
    repo = repo_for(caller, kind, namespace, name)
    commit = repos.resolve(repo, revision)
    try:
        item = repos.file_at(commit, path)
    except EntryNotFound as missing:
        answer = hub_error(missing)
        answer["X-Repo-Commit"] = commit.oid
        return answer
    return file_response(request, item, commit.oid)


def file_response(request: HttpRequest, item: HubFile, commit_oid: str) -> HttpResponse:
    """The file's bytes (or, for HEAD, its headers), whole or the one range asked for."""
    blob = item.blob
    size = blob.size_bytes
    path = item.path
    try:
        wanted = _byte_range(request.headers.get("Range", ""), size)
    except ValueError:
        answer = HttpResponse(status=416)
        answer["Content-Range"] = f"bytes */{size}"
        return answer
    first, last = wanted if wanted else (0, size - 1)
    length = max(0, last - first + 1)
    status = 206 if wanted else 200
    if request.method == "HEAD":
        answer = HttpResponse(status=status, content_type="application/octet-stream")
    else:
        try:
            stream = open_blob(blob, start=first)
        except StoredFileMissing:
            return hub_error(EntryNotFound(f"The bytes of {path} are missing from storage."))
        answer = StreamingHttpResponse(
            _chunks(stream, length), status=status, content_type="application/octet-stream"
        )
    answer["Content-Length"] = str(length)
    if wanted:
        answer["Content-Range"] = f"bytes {first}-{last}/{size}"
    _file_headers(answer, blob, commit_oid, path)
    return answer
