"""`POST /api/v1/projects/{id}/finetunes`: start a managed LoRA fine-tune in a project. The
body is the trainer's config plus job basics (`payloads.FinetuneCreateIn`); the answer is the
job, as `POST /api/v1/compute/jobs` gives it."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

from apps.accounts.permissions import caller
from apps.finetunes import payloads
from apps.jobs.api.jobs import ComputeView, create_response
from apps.jobs.api.serializers import JobOut
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
