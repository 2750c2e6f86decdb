"""`/api/v1/projects/{id}/sweeps`: create and list a project's sweeps, read one with its
trials, cancel one (also at `/api/v1/sweeps/{sweep_id}`, by the sweep's id alone). One view per
operation; each calls one service or selector."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.accounts.permissions import caller
from apps.core.api import page, page_out
from apps.core.errors import InvalidRequest
from apps.jobs.api.jobs import MAX_IDEMPOTENCY_KEY, ComputeView
from apps.projects.models import Project
from apps.sweeps import selectors, services
from apps.sweeps.serializers import SweepCreateIn, SweepOut, SweepSummaryOut

SweepPage = page_out(SweepSummaryOut, "SweepPage")


def _project(request, project_id: str) -> Project:
    return get_object_or_404(
        Project.objects.for_org(caller(request).organization), public_id=project_id
    )


def _idempotency_key(request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidRequest("The Idempotency-Key is too long.", param="Idempotency-Key")
    return key or None


class SweepCollectionView(ComputeView):
    @extend_schema(
        request=SweepCreateIn,
        responses={201: SweepOut, 200: SweepOut},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="optional: a retried create with the same key answers the sweep "
                "the first one made",
            )
        ],
        summary="Start a sweep: a template run over a grid or random set of values",
        operation_id="projects_sweeps_create",
    )
    def post(self, request, project_id: str):
        project = _project(request, project_id)
        who = caller(request)
        result = services.sweep_create(
            organization=who.organization,
            project=project,
            body=request.data,
            created_by=who.user,
            created_by_key=who.api_key,
            idempotency_key=_idempotency_key(request),
        )
        view = selectors.sweep_for_org(who.organization, result.sweep.public_id)
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(SweepOut(view).data, status=code)

    @extend_schema(
        responses=SweepPage,
        summary="A project's sweeps, newest first",
        operation_id="projects_sweeps_list",
    )
    def get(self, request, project_id: str):
        views = selectors.sweeps_of_project(_project(request, project_id))
        return page(views, SweepSummaryOut, next_cursor=None, total=len(views))


class SweepDetailView(ComputeView):
    @extend_schema(
        responses=SweepOut,
        summary="A sweep with its trials and the best one",
        operation_id="projects_sweeps_get",
    )
    def get(self, request, sweep_id: str, project_id: str | None = None):
        project = _project(request, project_id) if project_id else None
        view = selectors.sweep_for_org(caller(request).organization, sweep_id, project=project)
        return Response(SweepOut(view).data)


class SweepCancelView(ComputeView):
    @extend_schema(
        request=None,
        responses=SweepOut,
        summary="Cancel a sweep: terminate its active trials, skip the rest (idempotent)",
        operation_id="projects_sweeps_cancel",
    )
    def post(self, request, sweep_id: str, project_id: str | None = None):
        project = _project(request, project_id) if project_id else None
        organization = caller(request).organization
        view = selectors.sweep_for_org(organization, sweep_id, project=project)
        services.sweep_cancel(sweep=view.sweep)
        return Response(SweepOut(selectors.sweep_for_org(organization, sweep_id)).data)


class SweepByIdView(SweepDetailView):
    @extend_schema(
        responses=SweepOut,
        summary="A sweep by its id alone",
        operation_id="sweeps_get",
    )
    def get(self, request, sweep_id: str):
        return super().get(request, sweep_id)


class SweepByIdCancelView(SweepCancelView):
    @extend_schema(
        request=None,
        responses=SweepOut,
        summary="Cancel a sweep by its id alone (idempotent)",
        operation_id="sweeps_cancel",
    )
    def post(self, request, sweep_id: str):
        return super().post(request, sweep_id)
