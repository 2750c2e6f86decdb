"""Keyset (cursor) pagination: pages are found by the last key seen, never by OFFSET, so the
last page of a million rows costs what the first does.

Cursors are opaque to clients: url-safe base64 of a small JSON list of key values. A cursor
this module did not write (a key that is not a whole number of the id column's range, a time
that is not an ISO 8601 time with its zone, JSON nested past any reason) is a 400
`invalid_request` naming `cursor`, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from apps.core.errors import InvalidRequest

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# Ids are PostgreSQL `bigint`s (BigAutoField).
MAX_ID = 2**63 - 1
MAX_CURSOR_CHARS = 1000


@dataclass(frozen=True)
class PageRequest:
    limit: int
    after: list[Any] | None
    descending: bool


def encode_cursor(values: list[Any]) -> str:
    raw = json.dumps(values, separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _invalid_cursor() -> InvalidRequest:
    return InvalidRequest("The cursor is not valid.", param="cursor")


def decode_cursor(cursor: str, length: int) -> list[Any]:
    if len(cursor) > MAX_CURSOR_CHARS:  # ours are a few dozen characters
        raise _invalid_cursor()
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _invalid_cursor() from exc
    if not isinstance(values, list) or len(values) != length:
        raise _invalid_cursor()
    return values


def _cursor_id(value: Any) -> int:
    """An id from a cursor: a whole number an id column can hold (not a float such as
    `1e400`, which JSON reads as infinity, nor a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise _invalid_cursor()
    return value


def _cursor_time(value: Any) -> datetime:
    """A time from a cursor: ISO 8601 with its zone, as `created_page` writes it."""
    if not isinstance(value, str):
        raise _invalid_cursor()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _invalid_cursor() from exc
    if parsed.tzinfo is None:
        raise _invalid_cursor()
    return parsed


def parse_page_request(
    params, *, key_length: int = 1, default_order: str = "asc", max_limit: int = MAX_LIMIT
) -> PageRequest:
    """Read `limit`, `cursor` and `order` from query parameters, with clear errors."""
    raw_limit = params.get("limit")
    limit = DEFAULT_LIMIT
    if raw_limit not in (None, ""):
        try:
            limit = int(raw_limit)
        except ValueError as exc:
            raise InvalidRequest("limit must be a whole number.", param="limit") from exc
        if not 1 <= limit <= max_limit:
            raise InvalidRequest(f"limit must be between 1 and {max_limit}.", param="limit")
    order = params.get("order") or default_order
    if order not in {"asc", "desc"}:
        raise InvalidRequest("order must be asc or desc.", param="order")
    cursor = params.get("cursor")
    after = decode_cursor(cursor, key_length) if cursor else None
    return PageRequest(limit=limit, after=after, descending=order == "desc")


def id_page(queryset, page: PageRequest) -> tuple[list, str | None]:
    """One page of `queryset` ordered by `id`, and the cursor of the next page (or None)."""
    if page.after is not None:
        last_id = _cursor_id(page.after[0])
        queryset = (
            queryset.filter(id__lt=last_id) if page.descending else queryset.filter(id__gt=last_id)
        )
    queryset = queryset.order_by("-id" if page.descending else "id")
    rows = list(queryset[: page.limit + 1])
    has_more = len(rows) > page.limit
    rows = rows[: page.limit]
    next_cursor = encode_cursor([rows[-1].id]) if has_more else None
    return rows, next_cursor


def created_page(queryset, page: PageRequest) -> tuple[list, str | None]:
    """One page of `queryset` ordered by (created_at, id) — newest first when the page is
    descending — and the next page's cursor (or None). Rows created in the same instant are
    each listed once, because the id breaks the tie."""
    if page.after is not None:
        created_at, last_id = _cursor_time(page.after[0]), _cursor_id(page.after[1])
        if page.descending:
            after = Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id)
        else:
            after = Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=last_id)
        queryset = queryset.filter(after)
    order = ("-created_at", "-id") if page.descending else ("created_at", "id")
    rows = list(queryset.order_by(*order)[: page.limit + 1])
    if len(rows) <= page.limit:
        return rows, None
    rows = rows[: page.limit]
    return rows, encode_cursor([rows[-1].created_at.isoformat(), rows[-1].id])
