"""The usage report: what each resource (a job today, a service later) was billed in a time
window, from the posted `usage` transfers, as a cursor page or as CSV.

Rows are grouped per job; its type, public id and name come from its meters (written at
billing time, so a report needs nothing of `jobs`). `billable_seconds` is sixty times the
whole minutes billed; amounts are summed in micro-dollars and turned into dollars last.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import OuterRef, QuerySet, Subquery, Sum

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


def _meter_of_job(field: str) -> Subquery:
    return Subquery(
        Meter.objects.filter(job_id=OuterRef("job_id")).order_by("-id").values(field)[:1]
    )


def usage_rows(organization_id: int, window: Window, resource_type: str | None = None) -> QuerySet:
    """One dict per resource billed in the window, ordered by job id: `job_id`,
    `resource_type`, `resource_id`, `name`, `minutes` and `micros`."""
    return (
        _posted_usage(organization_id, window, resource_type)
        .values("job_id")
        .annotate(
            minutes=Sum("minutes"),
            micros=Sum("amount_micros"),
            resource_type=_meter_of_job("resource_type"),
            resource_id=_meter_of_job("resource_id"),
            name=_meter_of_job("resource_name"),
        )
        .order_by("job_id")
    )


def usage_totals(
    organization_id: int, window: Window, resource_type: str | None = None
) -> dict[str, int]:
    """Micro-dollars billed in the window over every row (not one page): `total` and one
    entry per resource type."""
    by_type = (
        _posted_usage(organization_id, window, resource_type)
        .annotate(kind=_meter_of_job("resource_type"))
        .values("kind")
        .annotate(micros=Sum("amount_micros"))
        .order_by()
    )
    totals = dict.fromkeys(RESOURCE_TYPES, 0)
    for row in by_type:
        totals[row["kind"]] = totals.get(row["kind"], 0) + row["micros"]
    totals["total"] = sum(totals.values())
    return totals


def usage_page(
    organization_id: int, window: Window, page: PageRequest, resource_type: str | None = None
) -> tuple[list[dict], str | None, int]:
    """One keyset page of `usage_rows` (by job id), the next cursor and the row count."""
    rows = usage_rows(organization_id, window, resource_type)
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
    return items, next_cursor, total


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
    rows = usage_rows(organization_id, window, resource_type)
    return csv_lines(rows.iterator(chunk_size=ITERATOR_CHUNK))
