"""The account side of the REST API: `GET /api/v1/whoami`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import caller
from apps.projects.models import Project


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
