"""The usage report: what each resource (a job today, a service later) was billed in a time
window, from the posted `usage` transfers, as a cursor page or as CSV.

Rows are grouped per job; its type, public id and name come from its newest meter (written
at billing time, so a report needs nothing of `jobs`), looked up a batch of rows at a time.
`billable_seconds` is sixty times the whole minutes billed; amounts are summed in
micro-dollars and turned into dollars last.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet, Sum

from apps.billing.models import Meter, Transfer
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, encode_cursor

RESOURCE_TYPES = ("job", "service")
CSV_HEADER = ["resource_type", "resource_id", "name", "billable_seconds", "accrued_usd"]
CSV_CHUNK_ROWS = 500
ITERATOR_CHUNK = 2000
# Spreadsheets run a cell starting with one of these as a formula; names are user input.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime


def _posted_usage(organization_id: int, window: Window, resource_type: str | None) -> QuerySet:
    usage = Transfer.objects.filter(
        organization_id=organization_id,
        code=Transfer.Code.USAGE,
        state=Transfer.State.POSTED,
        created_at__gte=window.start,
        created_at__lt=window.end,
    )
    if resource_type is not None:
        usage = usage.filter(
            job_id__in=Meter.objects.filter(
                organization_id=organization_id, resource_type=resource_type
            ).values("job_id")
        )
    return usage


def _grouped(organization_id: int, window: Window, resource_type: str | None) -> QuerySet:
    return (
        _posted_usage(organization_id, window, resource_type)
        .values("job_id")
        .annotate(minutes=Sum("minutes"), micros=Sum("amount_micros"))
        .order_by("job_id")
    )


def _named(rows: list[dict]) -> list[dict]:
    """`rows` with each job's `resource_type`, `resource_id` and `name` from its newest
    meter: one indexed query per batch, never a subquery per row."""
    meters = (
        Meter.objects.filter(job_id__in=[row["job_id"] for row in rows])
        .order_by("job_id", "-id")
        .values_list("job_id", "resource_type", "resource_id", "resource_name")
    )
    names: dict[int, tuple[str, str, str]] = {}
    for job_id, *fields in meters:
        names.setdefault(job_id, tuple(fields))
    for row in rows:
        row["resource_type"], row["resource_id"], row["name"] = names.get(
            row["job_id"], ("job", "", "")
        )
    return rows


def usage_totals(
    organization_id: int, window: Window, resource_type: str | None = None
) -> dict[str, int]:
    """Micro-dollars billed in the window over every row (not one page): `total` and one
    entry per resource type."""
    usage = _posted_usage(organization_id, window, resource_type)
    total = usage.aggregate(micros=Sum("amount_micros"))["micros"] or 0
    services = Meter.objects.filter(organization_id=organization_id, resource_type="service")
    service = (
        usage.filter(job_id__in=services.values("job_id")).aggregate(micros=Sum("amount_micros"))[
            "micros"
        ]
        or 0
    )
    return {"total": total, "job": total - service, "service": service}


def usage_page(
    organization_id: int, window: Window, page: PageRequest, resource_type: str | None = None
) -> tuple[list[dict], str | None, int]:
    """One keyset page of the resources billed in the window (by job id), the next cursor
    and the row count. Each row: `job_id`, `resource_type`, `resource_id`, `name`,
    `minutes` and `micros`."""
    rows = _grouped(organization_id, window, resource_type)
    total = rows.count()
    if page.after is not None:
        last = page.after[0]
        if isinstance(last, bool) or not isinstance(last, int) or last < 0:
            raise InvalidRequest("The cursor is not valid.", param="cursor")
        rows = rows.filter(job_id__lt=last) if page.descending else rows.filter(job_id__gt=last)
    if page.descending:
        rows = rows.order_by("-job_id")
    items = list(rows[: page.limit + 1])
    next_cursor = None
    if len(items) > page.limit:
        items = items[: page.limit]
        next_cursor = encode_cursor([items[-1]["job_id"]])
    return _named(items), next_cursor, total


def usage_rows(
    organization_id: int, window: Window, resource_type: str | None = None
) -> Iterator[dict]:
    """Every resource billed in the window, by job id, read `ITERATOR_CHUNK` rows at a
    time from a server-side cursor (rows as in `usage_page`)."""
    batch: list[dict] = []
    for row in _grouped(organization_id, window, resource_type).iterator(chunk_size=ITERATOR_CHUNK):
        batch.append(row)
        if len(batch) == ITERATOR_CHUNK:
            yield from _named(batch)
            batch = []
    yield from _named(batch)


def exact_usd(micros: int) -> str:
    """Micro-dollars as an exact decimal string (`12.345678`), so a CSV's column sums to the
    cent what the ledger holds."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"


def _cell(text: str) -> str:
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def csv_lines(rows: Iterable[dict]) -> Iterator[str]:
    """The header, then the rows as CSV text, a few hundred lines per chunk: memory stays
    flat however many rows stream through."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for count, row in enumerate(rows, start=1):
        writer.writerow(
            [
                row["resource_type"],
                row["resource_id"],
                _cell(row["name"] or ""),
                60 * row["minutes"],
                exact_usd(row["micros"]),
            ]
        )
        if count % CSV_CHUNK_ROWS == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate(0)
    yield buffer.getvalue()


def usage_csv(
    organization_id: int, window: Window, resource_type: str | None = None
) -> Iterator[str]:
    """The whole report as CSV, read from the database `ITERATOR_CHUNK` rows at a time."""
    return csv_lines(usage_rows(organization_id, window, resource_type))
