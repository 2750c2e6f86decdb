"""Request bodies sent with `Content-Encoding: gzip`, read back with a bound on what they
unpack to.

A compressed body passes the body guard (config/body_limits.py) on its compressed size, so
the bound on what it may unpack to is checked here, while it unpacks: a small body that
would inflate past the limit (a "zip bomb") is refused after at most `limit` bytes were
produced, never held whole. One gzip member, read to its end, with nothing after it, is a
valid body; anything else is refused rather than partly read.
"""

from __future__ import annotations

import zlib

from apps.core.errors import InvalidRequest, PayloadTooLarge, UnsupportedEncoding

GZIP = "gzip"
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around a deflate stream
_IDENTITY = frozenset({"", "identity"})


def decoded_body(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """`raw` as the sender meant it: unpacked when `content_encoding` is gzip (at most
    `limit` bytes, else 413 `payload_too_large`; not valid gzip is a 400
    `invalid_request`), as it is when there is none. Any other encoding is a 415
    `unsupported_media_type`."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in _IDENTITY:
        return raw
    if encoding not in (GZIP, "x-gzip"):
        raise UnsupportedEncoding(
            f"Content-Encoding {content_encoding!r} is not supported; send gzip or none."
        )
    return _gunzip(raw, limit)


def _gunzip(raw: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        # One byte past the limit tells "exactly at the limit" from "over it".
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise InvalidRequest("The body is not valid gzip.") from exc
    if len(body) > limit:
        raise PayloadTooLarge(
            f"The request body unpacks to more than the {limit} bytes this server accepts."
        )
    if not inflater.eof or inflater.unused_data:
        raise InvalidRequest("The body is not valid gzip: it is cut short or has data after it.")
    return body
