"""`POST /api/v1/projects/{id}/finetunes`: start a managed LoRA fine-tune in a project. The
body is the trainer's config plus job basics (`payloads.FinetuneCreateIn`); the answer is the
job, as `POST /api/v1/compute/jobs` gives it. `…/finetunes/plan` is its dry run, as
`POST /api/v1/compute/jobs/plan` is a container job's."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from apps.accounts.permissions import caller
from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.api.jobs import ComputeView, create_response
from apps.jobs.api.serializers import JobOut, PlanOut, plan_data
from apps.jobs.execution import placement
from apps.jobs.models import Job
from apps.projects.models import Project


class FinetuneCreateView(ComputeView):
    @extend_schema(
        request=payloads.FinetuneCreateIn,
        responses={201: JobOut, 200: JobOut},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True
            )
        ],
        summary="Start a managed LoRA fine-tune in a project",
        operation_id="projects_finetunes_create",
    )
    def post(self, request, project_id: str):
        project = get_object_or_404(
            Project.objects.for_org(caller(request).organization), public_id=project_id
        )
        payload = payloads.payload_from_api(request.data, project=project)
        return create_response(request, payload, Job.Kind.FINETUNE)


class FinetunePlanView(ComputeView):
    @extend_schema(
        request=payloads.FinetuneCreateIn,
        responses={200: PlanOut},
        summary="Plan a fine-tune: where it would run now, and why every other offer would not",
        description="A dry run of the fine-tune create: the same body, refused with the same "
        "errors, and nothing created, held or reserved.",
        operation_id="projects_finetunes_plan",
    )
    def post(self, request, project_id: str):
        organization = caller(request).organization
        project = get_object_or_404(Project.objects.for_org(organization), public_id=project_id)
        payload = payloads.payload_from_api(request.data, project=project)
        planned = services.job_plan(
            organization=organization, payload=payload, kind=Job.Kind.FINETUNE
        )
        plan = plan_data(
            placement.explain(planned.job),
            gpu_count=planned.job.gpu_count,
            hold_micros=planned.hold_micros,
        )
        return Response(PlanOut(plan).data)
