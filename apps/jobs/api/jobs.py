"""`/api/v1/compute/jobs`: create (with Idempotency-Key), plan (a dry run of create), list,
read, terminate, and read a job's logs and events. One view per operation; each calls one
service or selector."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.api import page
from apps.core.errors import InvalidRequest
from apps.core.pagination import parse_page_request
from apps.jobs import selectors, services
from apps.jobs.api.log_pages import LOG_MAX_LIMIT, log_page_body, log_page_response
from apps.jobs.api.serializers import (
    ArtifactOut,
    ArtifactPage,
    EventPage,
    JobEventOut,
    JobOut,
    JobPage,
    LogPage,
    PlanOut,
    plan_data,
)
from apps.jobs.artifacts.files import artifact_response
from apps.jobs.artifacts.store import artifact_pk
from apps.jobs.execution import placement
from apps.jobs.models import Job
from apps.jobs.specs import JobCreateIn

MAX_IDEMPOTENCY_KEY = 255

_PAGE_PARAMS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


class ComputeView(APIView):
    permission_classes = COMPUTE_PERMISSIONS


def _out_context(request) -> dict:
    """Jobs shown by these views say why they wait (JobOut's `waiting_reason`), and where
    the SSH gateway is by the host name the client called (`ssh`)."""
    return {"explain_waiting": True, "request": request}


def _idempotency_key(request) -> str:
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        raise InvalidRequest("The Idempotency-Key header is required.", param="Idempotency-Key")
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidRequest("The Idempotency-Key is too long.", param="Idempotency-Key")
    return key


def create_response(request, payload: dict, kind: str) -> Response:
    who = caller(request)
    result = services.job_create(
        organization=who.organization,
        payload=payload,
        idempotency_key=_idempotency_key(request),
        created_by=who.user,
        created_by_key=who.api_key,
        kind=kind,
    )
    return created_response(request, result)


def created_response(request, result: services.CreatedJob) -> Response:
    """201 with the new job, or 200 with the job an earlier request with this key created,
    as it stands now."""
    if result.created:
        job = selectors.as_created(result.job)
        return Response(
            JobOut(job, context=_out_context(request)).data, status=status.HTTP_201_CREATED
        )
    job = selectors.job_for_org(caller(request).organization, result.job.public_id)
    return Response(JobOut(job, context=_out_context(request)).data, status=status.HTTP_200_OK)


class JobCollectionView(ComputeView):
    @extend_schema(
        request=JobCreateIn,
        responses={201: JobOut, 200: JobOut},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True
            )
        ],
        summary="Create a job",
        operation_id="compute_jobs_create",
    )
    def post(self, request):
        return create_response(request, request.data, Job.Kind.CONTAINER)

    @extend_schema(
        responses=JobPage,
        parameters=[
            *_PAGE_PARAMS,
            OpenApiParameter("project", OpenApiTypes.STR),
            OpenApiParameter("state", OpenApiTypes.STR),
        ],
        summary="List jobs, newest first",
        operation_id="compute_jobs_list",
    )
    def get(self, request):
        page_request = parse_page_request(request.query_params, key_length=2, default_order="desc")
        jobs, next_cursor, total = selectors.job_list(
            caller(request).organization,
            page_request,
            project_id=request.query_params.get("project"),
            state=request.query_params.get("state"),
        )
        return page(
            jobs, JobOut, next_cursor=next_cursor, total=total, context=_out_context(request)
        )


class JobPlanView(ComputeView):
    @extend_schema(
        request=JobCreateIn,
        responses={200: PlanOut},
        summary="Plan a job: where it would run now, and why every other offer would not",
        description="A dry run of create: the same body, validated the same way (the same "
        "errors), and nothing created, held or reserved.",
        operation_id="compute_jobs_plan",
    )
    def post(self, request):
        planned = services.job_plan(organization=caller(request).organization, payload=request.data)
        explanation = placement.explain(planned.job)
        plan = plan_data(
            explanation, gpu_count=planned.job.gpu_count, hold_micros=planned.hold_micros
        )
        return Response(PlanOut(plan).data)


class JobDetailView(ComputeView):
    @extend_schema(responses=JobOut, summary="Get a job", operation_id="compute_jobs_get")
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        return Response(JobOut(job, context=_out_context(request)).data)


class JobRerunView(ComputeView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: JobOut, 200: JobOut},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True
            )
        ],
        summary="Run a job again, with optional overrides",
        description="The body holds fields to change, deep-merged into the request the job "
        "was made from (its kind's: a fine-tune's takes `learning_rate`, `max_steps`, …); "
        "`{}` or no body runs it again as it was. The new job's `rerun_of` names this one.",
        operation_id="compute_jobs_rerun",
    )
    def post(self, request, job_id: str):
        who = caller(request)
        job = selectors.job_for_org(who.organization, job_id)
        result = services.job_rerun(
            job=job,
            overrides=request.data,
            idempotency_key=_idempotency_key(request),
            created_by=who.user,
            created_by_key=who.api_key,
        )
        return created_response(request, result)


class JobTerminateView(ComputeView):
    @extend_schema(request=None, responses=JobOut, summary="Terminate a job (idempotent)")
    def post(self, request, job_id: str):
        organization = caller(request).organization
        job = selectors.job_for_org(organization, job_id)
        services.job_terminate(job=job)
        return Response(
            JobOut(selectors.job_for_org(organization, job_id), context=_out_context(request)).data
        )


class JobLogsView(ComputeView):
    @extend_schema(
        responses=LogPage,
        parameters=[
            OpenApiParameter(
                "limit", OpenApiTypes.INT, description=f"1 to {LOG_MAX_LIMIT}, default 50"
            ),
            _PAGE_PARAMS[1],
            OpenApiParameter("source", OpenApiTypes.STR, enum=["user", "system"]),
            OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"]),
        ],
        summary="A job's log lines, cursor-paginated",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        page = parse_page_request(request.query_params, max_limit=LOG_MAX_LIMIT)
        lines, next_cursor, total = selectors.log_page(
            job, page, source=request.query_params.get("source")
        )
        return log_page_response(request, log_page_body(lines, next_cursor, total))


class JobEventsView(ComputeView):
    @extend_schema(
        responses=EventPage,
        parameters=[
            *_PAGE_PARAMS,
            OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"]),
        ],
        summary="A job's lifecycle events, oldest first",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        events, next_cursor, total = selectors.event_page(
            job, parse_page_request(request.query_params)
        )
        return page(events, JobEventOut, next_cursor=next_cursor, total=total)


class JobArtifactsView(ComputeView):
    @extend_schema(
        responses=ArtifactPage,
        summary="A job's checkpoints and final adapter",
        operation_id="compute_jobs_artifacts_list",
    )
    def get(self, request, job_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        artifacts = list(job.artifacts.select_related("job").order_by("id"))
        return page(artifacts, ArtifactOut, next_cursor=None, total=len(artifacts))


class JobArtifactDownloadView(ComputeView):
    @extend_schema(
        responses={(200, "application/gzip"): OpenApiTypes.BINARY},
        summary="Download an artifact (tar.gz)",
        operation_id="compute_jobs_artifacts_download",
    )
    def get(self, request, job_id: str, artifact_id: str):
        job = selectors.job_for_org(caller(request).organization, job_id)
        artifact = job.artifacts.filter(pk=artifact_pk(artifact_id)).first()
        if artifact is None:
            raise Http404("No such artifact.")
        return artifact_response(artifact, job)
