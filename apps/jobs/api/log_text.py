"""`GET /api/v1/compute/jobs/{id}/logs.txt`: a job's whole log as plain text, streamed and
gzipped when accepted (`apps.jobs.telemetry.log_text` says how). The same organization
scoping and keys as every compute endpoint; another organization's job is a 404. The job
page's *Download log* serves the same response."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.errors import InvalidRequest
from apps.jobs import selectors
from apps.jobs.models import LogLine
from apps.jobs.telemetry.log_text import log_text_response


class JobLogTextView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR)},
        parameters=[OpenApiParameter("source", OpenApiTypes.STR, enum=["user", "system"])],
        summary="A job's whole log as plain text, streamed (gzip when accepted)",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        source = request.query_params.get("source") or None
        if source is not None and source not in LogLine.Source.values:
            raise InvalidRequest("source must be user or system.", param="source")
        return log_text_response(request, job, source)
