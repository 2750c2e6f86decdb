"""How an upload is read: one streaming pass that counts, hashes and checks rows as the
trainer will read them; byte offsets of bad UTF-8 across chunk boundaries; a raw body copied
to disk with its size limit even when no Content-Length announces it."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.core.errors import PayloadTooLarge
from apps.finetunes import raw_upload, services
from apps.finetunes.models import Dataset

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _upload(project, content: bytes, filename: str, dataset_format: str) -> Dataset:
    return services.dataset_upload(
        project=project,
        name="n",
        upload=SimpleUploadedFile(filename, content),
        dataset_format=dataset_format,
    )


def test_a_file_of_many_chunks_is_counted_and_hashed_whole(project, media_root):
    row = json.dumps({"text": "x" * 1000}).encode() + b"\n"
    content = row * 300 + b"\n\n"  # ~300 KB: several read chunks
    dataset = _upload(project, content, "big.jsonl", "text")
    assert dataset.rows == 300
    assert dataset.size_bytes == len(content)
    assert dataset.sha256 == hashlib.sha256(content).hexdigest()
    assert (media_root / dataset.file.name).read_bytes() == content


def test_a_bad_byte_past_the_first_chunk_is_named_by_its_offset(project):
    row = json.dumps({"text": "é" * 500}).encode() + b"\n"
    head = row * 200  # multi-byte characters fall across chunk boundaries
    assert len(head) > services.CHUNK_BYTES
    with pytest.raises(services.DatasetInvalid, match=rf"not UTF-8 text \(byte {len(head) + 2}\)"):
        _upload(project, head + b"ab\xff\n", "bad.jsonl", "text")
    assert not Dataset.objects.exists()


def test_rows_are_numbered_by_line_as_the_trainer_reads_them(project):
    # U+2028 inside a JSON string is not a line break for the trainer's file iteration.
    content = b'{"text": "one\xe2\x80\xa8still one"}\r\n\r\n{"text": "two"}\r{"nope": 1}\n'
    with pytest.raises(services.DatasetInvalid, match=r"^row 4: "):
        _upload(project, content, "lines.jsonl", "text")
    assert _upload(project, content[: content.index(b'{"nope')], "ok.jsonl", "text").rows == 2


def test_a_csv_the_reader_cannot_take_names_its_row(project):
    content = b"text\nshort\n" + b'"' + b"x" * 200_000 + b'"\n'
    with pytest.raises(services.DatasetInvalid, match=r"^row 2: not valid CSV"):
        _upload(project, content, "wide.csv", "text")


def test_json_nested_too_deeply_is_a_row_error(project):
    content = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    with pytest.raises(services.DatasetInvalid, match=r"^line 1: "):
        _upload(project, content, "deep.jsonl", "text")


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("../../etc/toy.jsonl", "toy.jsonl"),
        ("C:\\Users\\me\\toy.csv", "toy.csv"),
        ("my data (v2).jsonl", "my_data_v2.jsonl"),
        ("..jsonl", "dataset.jsonl"),
    ],
)
def test_uploaded_names_are_made_safe(project, name, stored):
    content = b'{"text": "hi"}\n' if name.endswith("jsonl") else b"text\nhi\n"
    dataset = _upload(project, content, name, "text")
    assert dataset.file.name == f"datasets/{project.public_id}/{stored}"


def test_a_long_unicode_name_fits_a_filesystem_name(project):
    dataset = _upload(project, b'{"text": "hi"}\n', "数据" * 200 + ".jsonl", "text")
    assert len(dataset.file.name.rsplit("/", 1)[-1].encode()) <= 255


class _Body:
    """A request whose body arrives without a Content-Length (chunked)."""

    def __init__(self, content: bytes) -> None:
        self.META = {"CONTENT_TYPE": "application/x-ndjson"}
        self._stream = io.BytesIO(content)

    def read(self, size: int = -1) -> bytes:
        return self._stream.read(size)


def test_a_raw_body_without_a_length_is_cut_off_at_the_limit(settings):
    settings.DATASET_MAX_BYTES = 100
    with pytest.raises(PayloadTooLarge, match="the limit is 100 bytes"):
        raw_upload.body_upload(_Body(b"x" * 101), filename="a.jsonl")
    upload = raw_upload.body_upload(_Body(b"x" * 100), filename="a.jsonl")
    try:
        assert (upload.name, upload.size, upload.read()) == ("a.jsonl", 100, b"x" * 100)
    finally:
        upload.close()
