"""A dataset sent as the raw request body (`Content-Type: application/x-ndjson`, `text/csv` or
`application/octet-stream`), made into the same kind of object a multipart upload gives, so
`services.dataset_upload` checks and stores both alike.

The body is copied in chunks into a temporary file on disk, never read whole into memory
(`request.body` would hold it, and Django refuses it past DATA_UPLOAD_MAX_MEMORY_SIZE). A
Content-Length over DATASET_MAX_BYTES is refused before a byte is read; a body without one is
counted as it streams.
"""

from __future__ import annotations

from django.core.files.uploadedfile import TemporaryUploadedFile
from django.http import HttpRequest

from apps.core.errors import PayloadTooLarge
from apps.finetunes.services import CHUNK_BYTES, dataset_max_bytes, too_large_message

# The content types a raw dataset body may have, and the suffix a file of each gets when the
# caller names none.
RAW_SUFFIXES = {
    "application/x-ndjson": ".jsonl",
    "application/octet-stream": ".jsonl",
    "text/csv": ".csv",
}


def media_type(request: HttpRequest) -> str:
    """The request's content type without its parameters (`; charset=…`), lower case."""
    return request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()


def announced_length(request: HttpRequest) -> int | None:
    raw = request.META.get("CONTENT_LENGTH") or ""
    return int(raw) if raw.isascii() and raw.isdigit() else None


def too_large(size: int | None = None) -> PayloadTooLarge:
    return PayloadTooLarge(f"The dataset {too_large_message(size)}.", param="file")


def body_upload(request: HttpRequest, *, filename: str) -> TemporaryUploadedFile:
    """The request body as an uploaded file called `filename`. Raises PayloadTooLarge when it
    is over DATASET_MAX_BYTES. The caller closes it (which deletes the temporary file)."""
    limit = dataset_max_bytes()
    announced = announced_length(request)
    if announced is not None and announced > limit:
        raise too_large(announced)
    upload = TemporaryUploadedFile(filename, media_type(request), 0, None)
    size = 0
    try:
        while chunk := request.read(CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise too_large()
            upload.write(chunk)
    except BaseException:
        upload.close()
        raise
    upload.size = size
    upload.seek(0)
    return upload
