"""`GET /api/v1/compute/jobs/{id}/metrics`: a job's metric series, a page of points at a time.

Points come in (step, id) order by keyset cursor, one series (`name`) or all, from a first
step on (`since_step`); points a later report or a resume superseded are left out. `names`
lists every series with its latest point, read from the job row, as is `total` unless a
`since_step` range must be counted.
"""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

from apps.accounts.permissions import caller
from apps.core.api import page
from apps.core.pagination import parse_page_request
from apps.jobs import selectors
from apps.jobs.api.jobs import ComputeView
from apps.jobs.api.serializers import MetricNameOut, MetricPage, MetricPointOut
from apps.jobs.models import Job


def series_names(job: Job) -> list[dict]:
    """Every series of the job, by name, with its latest point."""
    return [
        {
            "name": name,
            "latest": {
                "step": entry["step"],
                "value": entry["value"],
                "time": datetime.fromisoformat(entry["time"]),
            },
        }
        for name, entry in sorted((job.metric_series or {}).items())
    ]


class JobMetricsView(ComputeView):
    @extend_schema(
        responses=MetricPage,
        parameters=[
            OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
            OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of a page"),
            OpenApiParameter("name", OpenApiTypes.STR, description="one series; unknown: none"),
            OpenApiParameter(
                "since_step", OpenApiTypes.INT, description="points at this step or later (≥ 0)"
            ),
            OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"]),
        ],
        summary="A job's metric series and points, cursor-paginated by step",
        operation_id="compute_jobs_metrics_list",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        params = request.query_params
        since_step = selectors.since_step_param(params.get("since_step"))
        points, next_cursor, total = selectors.metric_page(
            job,
            parse_page_request(params, key_length=2),
            name=params.get("name") or None,
            since_step=since_step,
        )
        names = MetricNameOut(series_names(job), many=True).data
        return page(
            points, MetricPointOut, next_cursor=next_cursor, total=total, head={"names": names}
        )
