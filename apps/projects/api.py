"""`/api/v1/projects`: list, create and read the caller's organization's projects."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.errors import Conflict
from apps.accounts.permissions import caller
from apps.projects import services
from apps.projects.models import Project


class ProjectOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")

    class Meta:
        model = Project
        fields = ["id", "name", "slug", "description", "created_at"]


class ProjectIn(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    slug = serializers.SlugField(max_length=64, required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True, default="")


class ProjectListCreateView(APIView):
    @extend_schema(responses=ProjectOut(many=True), summary="List projects")
    def get(self, request):
        projects = Project.objects.for_org(caller(request).organization).order_by("name")
        data = ProjectOut(projects, many=True).data
        return Response({"data": data, "next_cursor": None, "total": len(data)})

    @extend_schema(request=ProjectIn, responses={201: ProjectOut}, summary="Create a project")
    def post(self, request):
        body = ProjectIn(data=request.data)
        body.is_valid(raise_exception=True)
        who = caller(request)
        try:
            project = services.project_create(
                organization=who.organization,
                created_by=who.user,
                **body.validated_data,
            )
        except services.ProjectSlugTaken as exc:
            raise Conflict(f"A project with slug {exc} already exists.", param="slug") from exc
        return Response(ProjectOut(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailView(APIView):
    @extend_schema(responses=ProjectOut, summary="Get a project")
    def get(self, request, project_id: str):
        project = get_object_or_404(
            Project.objects.for_org(caller(request).organization), public_id=project_id
        )
        return Response(ProjectOut(project).data)
