"""Datasets: upload (every row checked before anything is stored), rows and preview."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction

from apps.accounts.models import User
from apps.core.stored_files import open_stream
from apps.finetunes.models import Dataset
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

DATASET_SUFFIXES = (".jsonl", ".csv")


class DatasetInvalid(ValueError):
    """The uploaded file cannot be used; the message names the line or row and the field."""


def dataset_max_bytes() -> int:
    return settings.DATASET_MAX_BYTES


def dataset_upload(
    *,
    project: Project,
    name: str,
    upload,
    dataset_format: str,
    uploaded_by: User | None = None,
) -> Dataset:
    """Check every row of `upload` (.jsonl or .csv) as `dataset_format` and store it.

    Raises DatasetInvalid (nothing stored) when the file is too large, has another suffix,
    is not UTF-8, a line is not JSON, or a row does not fit the format. Rows are numbered as
    the trainer numbers them: JSONL by line (blank lines skipped), CSV by data row."""
    limit = dataset_max_bytes()
    size = upload.size
    if size > limit:
        raise DatasetInvalid(f"file is {_human_size(size)}; the limit is {_human_size(limit)}")
    filename = upload.name.rsplit("/", 1)[-1]
    suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if suffix not in DATASET_SUFFIXES:
        raise DatasetInvalid("file must end in .jsonl or .csv")
    content = b"".join(upload.chunks()) if hasattr(upload, "chunks") else upload.read()
    if len(content) > limit:
        raise DatasetInvalid(
            f"file is {_human_size(len(content))}; the limit is {_human_size(limit)}"
        )
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DatasetInvalid(f"file is not UTF-8 text (byte {error.start})") from None
    count = 0
    try:
        for row_number, row in _dataset_rows(text, suffix):
            parse_row(row, dataset_format, row_number)
            count += 1
    except DataError as error:
        raise DatasetInvalid(str(error)) from None
    if not count:
        raise DatasetInvalid("file has no rows")
    dataset = Dataset(
        project=project,
        name=name,
        dataset_format=dataset_format,
        rows=count,
        size_bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        uploaded_by=uploaded_by,
    )
    with transaction.atomic():
        dataset.file.save(filename, ContentFile(content), save=False)
        try:
            dataset.save()
        except Exception:
            dataset.file.delete(save=False)
            raise
    return dataset


def _dataset_rows(text: str, suffix: str) -> Iterator[tuple[int, Any]]:
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for row_number, row in enumerate(reader, start=1):
            yield row_number, {key: value for key, value in row.items() if key and value}
        return
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield line_number, json.loads(line)
        except ValueError as error:
            raise DataError(f"line {line_number}: not valid JSON ({error})") from None


def dataset_rows(dataset: Dataset) -> Iterator[tuple[int, Any]]:
    """`(row_number, row)` of a stored dataset's file."""
    # closing(): botocore's stream enters as its raw HTTP response, skipping its length check.
    with closing(open_stream(dataset.file.name)) as file:
        text = file.read().decode("utf-8-sig")
    yield from _dataset_rows(text, dataset.suffix)


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
