"""Datasets: upload (every row checked before anything is stored), rows, preview and delete.

An upload is read as a stream, once: the same pass counts and hashes the bytes, decodes them
and checks each row, so a file of DATASET_MAX_BYTES is never held in memory whole (Django has
already spooled a large upload to a temporary file, which is what gets stored).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.db import transaction
from django.db.models.fields.json import KT
from django.utils.text import get_valid_filename

from apps.accounts import storage
from apps.accounts.models import User
from apps.core.errors import Conflict
from apps.core.stored_files import open_stream
from apps.finetunes import inputs, payloads
from apps.finetunes.models import Dataset
from apps.jobs.models import Job
from apps.jobs.states import TERMINAL_STATES
from apps.projects.models import Project
from trainer.formats import (
    IGNORE_INDEX,
    Conversation,
    DataError,
    PromptCompletion,
    Sample,
    Text,
    Tokens,
    parse_row,
)

logger = logging.getLogger(__name__)

DATASET_SUFFIXES = (".jsonl", ".csv")
CHUNK_BYTES = 64 * 1024
# Room for the storage's prefix and a collision suffix within Dataset.file's 500 characters,
# and under the 255 bytes most filesystems allow for one name.
MAX_FILENAME_BYTES = 120


class DatasetInvalid(ValueError):
    """The uploaded file cannot be used; the message names the line or row and the field."""


class DatasetTooLarge(DatasetInvalid):
    """The uploaded file is over DATASET_MAX_BYTES (the API answers 413, not 400)."""


class DatasetInUse(Conflict):
    """A job that has not ended names the dataset: deleting it would fail that job's next
    attempt, which downloads it when it starts."""

    error_type = "dataset_in_use"
    default_detail = "The dataset is used by a job that has not ended."


def dataset_max_bytes() -> int:
    return settings.DATASET_MAX_BYTES


def too_large_message(size: int | None = None) -> str:
    """What an upload over the limit is told; `size` when it is known."""
    limit = _human_size(dataset_max_bytes())
    if size is None:
        return f"file is larger than the limit; the limit is {limit}"
    return f"file is {_human_size(size)}; the limit is {limit}"


def clean_filename(name: str) -> str:
    """The stored name of an uploaded file called `name`: its last path part (either slash),
    with only letters, digits, `-`, `_` and `.`, and not so long a filesystem refuses it."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    stem, dot, suffix = base.rpartition(".")
    if not dot:
        stem, suffix = base, ""
    stem = _safe_part(stem).encode()[:MAX_FILENAME_BYTES].decode("utf-8", "ignore") or "dataset"
    suffix = _safe_part(suffix)[:16]
    return f"{stem}.{suffix}" if suffix else stem


def _safe_part(name: str) -> str:
    try:
        return get_valid_filename(name).strip(".")
    except SuspiciousFileOperation:  # nothing usable left
        return ""


@dataclass
class _Checked:
    rows: int
    size_bytes: int
    sha256: str


def dataset_upload(
    *,
    project: Project,
    name: str,
    upload,
    dataset_format: str,
    uploaded_by: User | None = None,
) -> Dataset:
    """Check every row of `upload` (an UploadedFile named .jsonl or .csv) as `dataset_format`
    and store it.

    Raises DatasetInvalid (nothing stored) when the file has another suffix, is not UTF-8, a
    line is not JSON or CSV, or a row does not fit the format, and DatasetTooLarge when it is
    over DATASET_MAX_BYTES; QuotaExceeded (an API error, 413 `quota_exceeded`) when it does
    not fit in the organization's storage quota (judged before the rows are read, and again
    under the organization's row lock before it is stored). Rows are numbered as the
    trainer numbers them: JSONL by line (blank lines skipped), CSV by data row."""
    size = getattr(upload, "size", None)
    if size is not None and size > dataset_max_bytes():
        raise DatasetTooLarge(too_large_message(size))
    organization = project.organization
    if size is not None:
        storage.check_room(organization, size, what="dataset", param="file")
    filename = clean_filename(upload.name or "")
    suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if suffix not in DATASET_SUFFIXES:
        raise DatasetInvalid("file must end in .jsonl or .csv")
    checked = _check_rows(upload, suffix, dataset_format)
    dataset = Dataset(
        project=project,
        name=name,
        dataset_format=dataset_format,
        rows=checked.rows,
        size_bytes=checked.size_bytes,
        sha256=checked.sha256,
        uploaded_by=uploaded_by,
    )
    upload.seek(0)
    with transaction.atomic():
        storage.lock_for_storage(organization)
        storage.check_room(organization, checked.size_bytes, what="dataset", param="file")
        dataset.file.save(filename, upload, save=False)
        try:
            dataset.save()
        except Exception:
            dataset.file.delete(save=False)
            raise
    return dataset


def _check_rows(upload: IO[bytes], suffix: str, dataset_format: str) -> _Checked:
    upload.seek(0)
    reader = _ByteReader(upload, limit=dataset_max_bytes())
    count = 0
    try:
        for row_number, row in _rows(io.BufferedReader(reader, CHUNK_BYTES), suffix):
            parse_row(row, dataset_format, row_number)
            count += 1
        reader.drain()
    except UnicodeDecodeError:
        raise DatasetInvalid(f"file is not UTF-8 text (byte {_first_bad_byte(upload)})") from None
    except DataError as error:
        raise DatasetInvalid(str(error)) from None
    if not count:
        raise DatasetInvalid("file has no rows")
    return _Checked(rows=count, size_bytes=reader.size, sha256=reader.sha256.hexdigest())


class _ByteReader(io.RawIOBase):
    """A raw binary stream over any object with `read(n)` (an upload, botocore's body) that
    hashes and counts what passes and refuses more than `limit` bytes."""

    def __init__(self, source, *, limit: int | None = None) -> None:
        self.source = source
        self.limit = limit
        self.size = 0
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.source.read(len(buffer))
        if not data:
            return 0
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise DatasetTooLarge(too_large_message())
        self.sha256.update(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        """Read what is left (trailing bytes after the last row), so the size and digest are
        the whole file's."""
        while self.read(CHUNK_BYTES):
            pass


def _first_bad_byte(upload: IO[bytes]) -> int:
    """The offset of the first byte that is not UTF-8, for the error message (read again, as
    the text decoder reports offsets within its own chunk)."""
    upload.seek(0)
    start, carry = 0, b""
    while chunk := upload.read(CHUNK_BYTES):
        buffer = carry + chunk
        try:
            buffer.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.reason == "unexpected end of data" and error.end == len(buffer):
                start, carry = start + error.start, buffer[error.start :]
                continue
            return start + error.start
        start, carry = start + len(buffer), b""
    return start


def _rows(binary: IO[bytes], suffix: str) -> Iterator[tuple[int, Any]]:
    """`(row_number, row)` of a dataset file read from `binary`, as the trainer reads it
    (`trainer.data`): JSONL by line with universal newlines, CSV by data row. Raises
    DataError naming the line or row, and UnicodeDecodeError."""
    if suffix == ".csv":
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")
        row_number = 0
        try:
            for row_number, row in enumerate(csv.DictReader(text), start=1):
                yield row_number, {key: value for key, value in row.items() if key and value}
        except csv.Error as error:
            raise DataError(f"row {row_number + 1}: not valid CSV ({error})") from None
        return
    text = io.TextIOWrapper(binary, encoding="utf-8-sig")
    for line_number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            yield line_number, json.loads(line)
        except ValueError as error:
            raise DataError(f"line {line_number}: not valid JSON ({error})") from None
        except RecursionError:
            raise DataError(f"line {line_number}: nested too deeply") from None


def dataset_rows(dataset: Dataset) -> Iterator[tuple[int, Any]]:
    """`(row_number, row)` of a stored dataset's file, read as far as the caller iterates."""
    # closing(): botocore's stream enters as its raw HTTP response, skipping its length check.
    with closing(open_stream(dataset.file.name)) as file:
        yield from _rows(io.BufferedReader(_ByteReader(file), CHUNK_BYTES), dataset.suffix)


def dataset_user(dataset: Dataset) -> Job | None:
    """The oldest fine-tune of the dataset's project that names it and has not ended."""
    jobs = (
        Job.objects.filter(project_id=dataset.project_id, kind=Job.Kind.FINETUNE)
        .exclude(state__in=TERMINAL_STATES)
        # A cheap text filter first; the config is parsed to be sure.
        .alias(config=KT(f"spec__container__env__{payloads.CONFIG_ENV}"))
        .filter(config__contains=dataset.public_id)
        .order_by("created_at", "id")
    )
    return next(
        (job for job in jobs if inputs.referenced_dataset_id(job) == dataset.public_id), None
    )


def dataset_delete(dataset: Dataset) -> None:
    """Delete the dataset and, once that commits, its stored file.

    Raises DatasetInUse naming the job while a fine-tune that has not ended names it: its
    next attempt downloads the file when it starts. The row is locked while checking, so two
    deletes do not both go ahead; a job created at the same moment may still lose the race
    and then fails naming the missing file, as for any dataset deleted before it started."""
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        if locked is None:  # deleted meanwhile: the caller's goal is met
            return
        job = dataset_user(locked)
        if job is not None:
            raise DatasetInUse(
                f"Dataset {locked.public_id} is used by job {job.public_id} ({job.state}); "
                "delete it once that job has ended."
            )
        storage, name = locked.file.storage, locked.file.name
        locked.delete()
        transaction.on_commit(lambda: _delete_file(storage, name))


def _delete_file(storage, name: str) -> None:
    try:
        storage.delete(name)
    except Exception:  # the row is gone either way; an orphaned file is only disk
        logger.exception("could not delete the stored file %s of a deleted dataset", name)


@dataclass(frozen=True)
class PreviewRow:
    row: int
    prompt: str
    completion: str


def dataset_preview(
    source: Dataset | Iterable[Any], n: int = 5, *, dataset_format: str | None = None
) -> list[PreviewRow]:
    """The first `n` rows as training text: what the model is given (prompt) and what it
    learns (completion). Pre-tokenized rows show token counts instead of text. `source` is a
    stored Dataset, or plain rows with `dataset_format`."""
    if isinstance(source, Dataset):
        dataset_format = source.dataset_format
        numbered: Iterable[tuple[int, Any]] = dataset_rows(source)
    else:
        if dataset_format is None:
            raise TypeError("rows need a dataset_format")
        numbered = enumerate(source, start=1)
    preview = []
    for row_number, row in numbered:
        if len(preview) >= n:
            break
        preview.append(sample_preview(parse_row(row, dataset_format, row_number), row_number))
    return preview


def sample_preview(sample: Sample, row_number: int) -> PreviewRow:
    if isinstance(sample, PromptCompletion):
        return PreviewRow(row_number, sample.prompt, sample.completion)
    if isinstance(sample, Conversation):
        *context, (_, reply) = sample.messages
        prompt = "\n".join(f"{role}: {content}" for role, content in context)
        return PreviewRow(row_number, prompt, reply)
    if isinstance(sample, Text):
        return PreviewRow(row_number, "", sample.text)
    if isinstance(sample, Tokens):
        total = len(sample.input_ids)
        trained = (
            total
            if sample.labels is None
            else sum(1 for label in sample.labels if label != IGNORE_INDEX)
        )
        return PreviewRow(row_number, f"{total} token ids", f"{trained} trained token ids")
    raise TypeError(f"unknown sample {sample!r}")


def _human_size(size: int) -> str:
    for unit in ("bytes", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} bytes"
