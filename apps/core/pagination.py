"""Keyset (cursor) pagination: pages are found by the last key seen, never by OFFSET, so the
last page of a million rows costs what the first does.

Cursors are opaque to clients: url-safe base64 of a small JSON list of key values.
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


@dataclass(frozen=True)
class PageRequest:
    limit: int
    after: list[Any] | None
    descending: bool


def encode_cursor(values: list[Any]) -> str:
    raw = json.dumps(values, separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, length: int) -> list[Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("The cursor is not valid.", param="cursor") from exc
    if not isinstance(values, list) or len(values) != length:
        raise InvalidRequest("The cursor is not valid.", param="cursor")
    return values


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
        try:
            last_id = int(page.after[0])
        except (TypeError, ValueError) as exc:
            raise InvalidRequest("The cursor is not valid.", param="cursor") from exc
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
        try:
            created_at, last_id = datetime.fromisoformat(page.after[0]), int(page.after[1])
        except (TypeError, ValueError) as exc:
            raise InvalidRequest("The cursor is not valid.", param="cursor") from exc
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
