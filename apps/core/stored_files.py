"""Reading stored files (datasets, artifacts) as streams, whichever storage holds them.

`default_storage.open()` is fine on the filesystem, but django-storages' S3 file downloads the
whole object to a temporary file before its first byte can be read: a checkpoint of gigabytes
would reach a client only after the server fetched all of it (past the runner's timeout). So
an S3 object is read straight from the GET's body instead. Any other storage is opened as usual.
"""

from __future__ import annotations

from typing import IO

from django.core.files.storage import Storage, storages
from django.http import FileResponse


class StoredFileMissing(FileNotFoundError):
    """The storage has no file under that name (deleted behind the database's back)."""


def _is_s3(storage: Storage) -> bool:
    from storages.backends.s3 import S3Storage

    return isinstance(storage, S3Storage)


def open_stream(name: str, storage: Storage | None = None, *, start: int = 0) -> IO[bytes]:
    """A binary stream of the stored file `name` from `storage`, by default the default
    storage, from byte `start` on. Close it when done (with `contextlib.closing`, not `with`:
    botocore's stream enters as its raw HTTP response). Raises StoredFileMissing when there
    is none."""
    # The configured instance itself, not the lazy `default_storage`, which may not be set up
    # yet in this process and would not show its class.
    storage = storage or storages["default"]
    if _is_s3(storage):
        from botocore.exceptions import ClientError

        # `_normalize_name` applies the storage's `location` prefix the way its own reads do.
        key = storage._normalize_name(name)  # type: ignore[attr-defined]
        ranged = {"Range": f"bytes={start}-"} if start else {}
        try:
            answer = storage.connection.meta.client.get_object(  # type: ignore[attr-defined]
                Bucket=storage.bucket_name,  # type: ignore[attr-defined]
                Key=key,
                **ranged,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise StoredFileMissing(name) from exc
            raise
        return answer["Body"]
    try:
        stream = storage.open(name, "rb")
    except FileNotFoundError as exc:
        raise StoredFileMissing(name) from exc
    if start:
        stream.seek(start)
    return stream


def stream_response(
    name: str,
    *,
    size: int,
    content_type: str,
    filename: str | None = None,
    headers: dict[str, str] | None = None,
) -> FileResponse:
    """A FileResponse streaming the stored file, with its Content-Length (a stream from an
    object store cannot tell it). Raises StoredFileMissing."""
    response = FileResponse(
        open_stream(name),
        as_attachment=filename is not None,
        filename=filename or "",
        content_type=content_type,
    )
    response["Content-Length"] = str(size)
    for header, value in (headers or {}).items():
        response[header] = value
    return response
