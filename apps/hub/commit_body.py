"""Reading a commit request: the newline-delimited JSON the Hugging Face client posts to
`/api/{type}s/{repo}/commit/{revision}`.

The first line is the header (`{"key": "header", "value": {"summary", "description",
"parentCommit"?}}`); each following line is one operation: `file` (content inline, base64),
`lfsFile` (a blob already stored, by sha256), `deletedFile` or `deletedFolder`.

An inline file can be gigabytes of base64 on one line. Lines in the stock client's exact
layout (`{"key": "file", "value": {"content": "…`) are streamed: the base64 is decoded in
chunks into a temporary file while it is hashed, so memory stays flat whatever the file's
size. Any other line is parsed whole, up to MAX_LINE_BYTES.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from apps.core.errors import InvalidRequest, PayloadTooLarge
from apps.hub.blobs import check_file_size, is_sha256
from apps.hub.names import check_path

MAX_LINE_BYTES = 16 * 1024 * 1024
READ_BYTES = 1024 * 1024
STREAMED_FILE_PREFIX = b'{"key": "file", "value": {"content": "'
SPOOL_BYTES = 8 * 1024 * 1024


@dataclass
class InlineFile:
    path: str
    content: IO[bytes]  # positioned at 0; closed by the caller
    sha256: str
    size: int


@dataclass
class StoredFile:
    path: str
    sha256: str
    size: int | None


@dataclass
class CommitRequest:
    summary: str
    description: str = ""
    parent_commit: str | None = None
    inline: list[InlineFile] = field(default_factory=list)
    stored: list[StoredFile] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)
    deleted_folders: list[str] = field(default_factory=list)

    def close(self) -> None:
        for item in self.inline:
            item.content.close()

    def paths(self) -> list[str]:
        return [item.path for item in self.inline] + [item.path for item in self.stored]


class _Buffered:
    """A read buffer over a byte stream with the few moves the parser needs."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._buffer = b""
        self._eof = False

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) < wanted and not self._eof:
            data = self._stream.read(READ_BYTES)
            if not data:
                self._eof = True
            self._buffer += data

    def peek(self, size: int) -> bytes:
        self._fill(size)
        return self._buffer[:size]

    def skip(self, size: int) -> None:
        self._fill(size)
        self._buffer = self._buffer[size:]

    def readline(self, limit: int) -> bytes:
        """One line without its newline; b"" at the end. Refuses a line over `limit`."""
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                return line
            if len(self._buffer) > limit:
                raise PayloadTooLarge(f"A commit line is longer than {limit} bytes.")
            if self._eof:
                line, self._buffer = self._buffer, b""
                return line
            start = len(self._buffer)
            self._fill(len(self._buffer) + READ_BYTES)

    def chunks_until(self, stop: int) -> Iterator[bytes]:
        """The bytes up to (not including) the byte `stop`, which is consumed."""
        while True:
            end = self._buffer.find(bytes([stop]))
            if end >= 0:
                chunk, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                if chunk:
                    yield chunk
                return
            if self._buffer:
                chunk, self._buffer = self._buffer, b""
                yield chunk
            if self._eof:
                raise InvalidRequest("The commit ends inside a file's content.")
            self._fill(READ_BYTES)


def _object(line: bytes) -> dict:
    try:
        item = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"A commit line is not JSON: {exc}.") from exc
    if not isinstance(item, dict) or not isinstance(item.get("value"), dict):
        raise InvalidRequest('A commit line is an object with "key" and "value".')
    return item


def _decode_to_file(chunks: Iterator[bytes]) -> tuple[IO[bytes], str, int]:
    """Decode base64 `chunks` into a temporary file; (file at 0, sha256, size)."""
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned
    digest = hashlib.sha256()
    size = 0
    carry = b""
    try:
        for chunk in chunks:
            data = carry + chunk
            usable = len(data) - len(data) % 4
            carry = data[usable:]
            decoded = base64.b64decode(data[:usable], validate=True)
            size += len(decoded)
            check_file_size(size)
            digest.update(decoded)
            out.write(decoded)
        if carry:
            raise binascii.Error("incomplete final group")
    except binascii.Error as exc:
        out.close()
        raise InvalidRequest(f"A file's content is not valid base64 ({exc}).") from exc
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out, digest.hexdigest(), size


def _inline_from_value(value: dict) -> InlineFile:
    path = check_path(value.get("path"))
    if value.get("encoding", "base64") != "base64":
        raise InvalidRequest("A file's content is sent base64-encoded.", param=path)
    content = value.get("content")
    if not isinstance(content, str):
        raise InvalidRequest(f"The file {path} has no content.", param=path)
    handle, sha256, size = _decode_to_file(iter([content.encode("ascii", "replace")]))
    return InlineFile(path=path, content=handle, sha256=sha256, size=size)


def _streamed_inline(reader: _Buffered) -> InlineFile:
    reader.skip(len(STREAMED_FILE_PREFIX))
    handle, sha256, size = _decode_to_file(reader.chunks_until(ord('"')))
    try:
        rest = reader.readline(64 * 1024)
        value = _object(b'{"key": "file", "value": {"content": ""' + rest)["value"]
        path = check_path(value.get("path"))
        if value.get("encoding", "base64") != "base64":
            raise InvalidRequest("A file's content is sent base64-encoded.", param=path)
    except BaseException:
        handle.close()
        raise
    return InlineFile(path=path, content=handle, sha256=sha256, size=size)


def _add_operation(request: CommitRequest, item: dict) -> None:
    key, value = item.get("key"), item["value"]
    if key == "file":
        request.inline.append(_inline_from_value(value))
    elif key == "lfsFile":
        path = check_path(value.get("path"))
        oid = value.get("oid")
        if value.get("algo", "sha256") != "sha256" or not is_sha256(oid):
            raise InvalidRequest(f"The file {path} names its content by sha256.", param=path)
        size = value.get("size")
        request.stored.append(
            StoredFile(path=path, sha256=oid, size=size if isinstance(size, int) else None)
        )
    elif key == "deletedFile":
        request.deleted_files.append(check_path(value.get("path")))
    elif key == "deletedFolder":
        request.deleted_folders.append(check_path(str(value.get("path", "")).rstrip("/")))
    else:
        raise InvalidRequest(f"Unknown commit operation {key!r}.", param="key")


def read_commit(stream: IO[bytes]) -> CommitRequest:
    """Parse a commit body. Raises InvalidRequest (with nothing left open) on a bad one."""
    reader = _Buffered(stream)
    header = _object(reader.readline(MAX_LINE_BYTES) or b"null")
    if header.get("key") != "header":
        raise InvalidRequest('A commit starts with its "header" line.', param="header")
    value = header["value"]
    summary = value.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise InvalidRequest("A commit needs a summary (its message).", param="summary")
    parent = value.get("parentCommit")
    request = CommitRequest(
        summary=summary.strip(),
        description=str(value.get("description") or ""),
        parent_commit=parent if isinstance(parent, str) else None,
    )
    try:
        while True:
            if reader.peek(len(STREAMED_FILE_PREFIX)) == STREAMED_FILE_PREFIX:
                request.inline.append(_streamed_inline(reader))
                continue
            line = reader.readline(MAX_LINE_BYTES)
            if not line.strip():
                if not reader.peek(1):
                    break
                continue
            _add_operation(request, _object(line))
        paths = request.paths() + request.deleted_files
        if len(paths) != len(set(paths)):
            raise InvalidRequest("A commit names each path once.", param="path")
    except BaseException:
        request.close()
        raise
    return request
