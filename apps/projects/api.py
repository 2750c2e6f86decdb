"""`/api/v1/projects`: list, create and read the caller's organization's projects; and
`GET /api/v1/whoami`, which names the caller, its organization and that organization's projects."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import caller
from apps.core.api import page, page_out, validated
from apps.core.errors import Conflict
from apps.projects import services
from apps.projects.models import Project


class ProjectOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")

    class Meta:
        model = Project
        fields = ["id", "name", "slug", "description", "created_at"]


# Every project in one page, by name.
ProjectPage = page_out(ProjectOut, "ProjectPage")


class ProjectIn(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    slug = serializers.SlugField(max_length=64, required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True, default="")


class ProjectListCreateView(APIView):
    @extend_schema(responses=ProjectPage, summary="List projects", operation_id="v1_projects_list")
    def get(self, request):
        projects = list(Project.objects.for_org(caller(request).organization).order_by("name"))
        return page(projects, ProjectOut, next_cursor=None, total=len(projects))

    @extend_schema(request=ProjectIn, responses={201: ProjectOut}, summary="Create a project")
    def post(self, request):
        body = validated(ProjectIn, request.data)
        who = caller(request)
        try:
            project = services.project_create(
                organization=who.organization, created_by=who.user, **body
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


# -- GET /api/v1/whoami: who is calling, for which organization, and its projects ----------


class _OrganizationOut(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.CharField()
    compute_enabled = serializers.BooleanField()


class _UserOut(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.CharField()


class _KeyOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)


class _ProjectRef(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    slug = serializers.CharField()
    name = serializers.CharField()


class WhoamiOut(serializers.Serializer):
    principal = serializers.ChoiceField(choices=["user", "api_key"])
    user = _UserOut(allow_null=True)
    api_key = _KeyOut(allow_null=True)
    organization = _OrganizationOut()
    role = serializers.CharField()
    projects = _ProjectRef(many=True)


class WhoamiView(APIView):
    @extend_schema(responses=WhoamiOut, summary="Who is calling, for which organization")
    def get(self, request):
        who = caller(request)
        payload = {
            "principal": "api_key" if who.api_key else "user",
            "user": who.user,
            "api_key": who.api_key,
            "organization": who.organization,
            "role": who.role,
            "projects": Project.objects.for_org(who.organization).order_by("name"),
        }
        return Response(WhoamiOut(payload).data)
