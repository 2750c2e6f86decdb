"""`/api/v1/compute/usage` and `/api/v1/compute/usage.csv`: what each resource was billed in
a window, from the ledger's posted usage.

The window is `[from, to)` in ISO 8601 (a time without a zone is UTC; the answer gives both
in UTC), by default the last 30 days up to now. `summary` covers every row of the window and
filter, not only the page; the CSV streams every row, read in chunks, so its memory stays
flat, and its `accrued_usd` column sums exactly to `summary.total_usd`. Both answer API keys
and signed-in sessions (the Billing page links to the CSV).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.billing import reports
from apps.core.api import page, page_out
from apps.core.errors import InvalidRequest
from apps.core.pagination import parse_page_request
from apps.core.serializers import IsoDateTimeField, UsdField

DEFAULT_WINDOW = timedelta(days=30)

_FILTER_PARAMS = [
    OpenApiParameter("resource_type", OpenApiTypes.STR, enum=list(reports.RESOURCE_TYPES)),
    OpenApiParameter("from", OpenApiTypes.DATETIME, description="default: 30 days before `to`"),
    OpenApiParameter("to", OpenApiTypes.DATETIME, description="exclusive; default: now"),
]


def _time_param(params, name: str) -> datetime | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    if " " in raw and "T" in raw:  # an unescaped `+` of the zone arrives as a space
        raw = raw.replace(" ", "+")
    try:
        parsed = parse_datetime(raw)
        if parsed is None and (day := parse_date(raw)) is not None:
            parsed = datetime(day.year, day.month, day.day)
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidRequest(f"{name} must be an ISO 8601 date or time.", param=name)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:  # in UTC: the database takes zone offsets of under 16 hours only
        return parsed.astimezone(UTC)
    except OverflowError:  # past either end of the calendar once in UTC
        return (datetime.min if parsed.year == 1 else datetime.max).replace(tzinfo=UTC)


def _days_before(end: datetime) -> datetime:
    try:
        return end - DEFAULT_WINDOW
    except OverflowError:  # `to` within 30 days of year 1
        return datetime.min.replace(tzinfo=UTC)


def filters(params) -> tuple[reports.Window, str | None]:
    """The window and resource type a request asks for, or 400 naming the bad parameter."""
    end = _time_param(params, "to") or timezone.now()
    start = _time_param(params, "from") or _days_before(end)
    if start > end:
        raise InvalidRequest("from must not be after to.", param="from")
    resource_type = params.get("resource_type") or None
    if resource_type is not None and resource_type not in reports.RESOURCE_TYPES:
        raise InvalidRequest(
            f"resource_type must be one of {', '.join(reports.RESOURCE_TYPES)}.",
            param="resource_type",
        )
    return reports.Window(start, end), resource_type


# Renders a `reports.Window`; `from` is a keyword, so the fields are given by name.
class WindowOut(serializers.Serializer):
    def get_fields(self):
        return {
            "from": IsoDateTimeField(source="start"),
            "to": IsoDateTimeField(source="end"),
        }


# Renders `reports.usage_totals`: micro-dollars by resource type.
class UsageSummaryOut(serializers.Serializer):
    total_usd = UsdField(source="total")
    job_usd = UsdField(source="job")
    service_usd = UsdField(source="service")


class UsageRowOut(serializers.Serializer):
    resource_type = serializers.ChoiceField(choices=list(reports.RESOURCE_TYPES))
    resource_id = serializers.CharField()
    name = serializers.CharField()
    billable_seconds = serializers.SerializerMethodField()
    accrued_usd = UsdField(source="micros")

    def get_billable_seconds(self, row: dict) -> int:
        return 60 * row["minutes"]


UsagePageOut = page_out(UsageRowOut, "UsagePageOut", window=WindowOut(), summary=UsageSummaryOut())


class UsageView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(
        parameters=[
            *_FILTER_PARAMS,
            OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
            OpenApiParameter("cursor", OpenApiTypes.STR, description="the last next_cursor"),
        ],
        responses=UsagePageOut,
        operation_id="compute_usage",
        summary="Usage per resource in a window",
    )
    def get(self, request):
        organization_id = caller(request).organization.pk
        window, resource_type = filters(request.query_params)
        page_request = parse_page_request(request.query_params)
        rows, next_cursor, total = reports.usage_page(
            organization_id, window, page_request, resource_type
        )
        totals = reports.usage_totals(organization_id, window, resource_type)
        head = {"window": WindowOut(window).data, "summary": UsageSummaryOut(totals).data}
        return page(rows, UsageRowOut, next_cursor=next_cursor, total=total, head=head)


class UsageCsvView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    def perform_content_negotiation(self, request, force=False):
        """The body is CSV whatever the client accepts; errors are still JSON."""
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        parameters=_FILTER_PARAMS,
        responses={(200, "text/csv"): OpenApiTypes.STR},
        operation_id="compute_usage_csv",
        summary="Usage per resource in a window, as CSV",
    )
    def get(self, request):
        organization_id = caller(request).organization.pk
        window, resource_type = filters(request.query_params)
        response = StreamingHttpResponse(
            reports.usage_csv(organization_id, window, resource_type),
            content_type="text/csv; charset=utf-8",
        )
        stamp = f"{window.start:%Y%m%d}-{window.end:%Y%m%d}"
        response["Content-Disposition"] = f'attachment; filename="usage-{stamp}.csv"'
        return response
