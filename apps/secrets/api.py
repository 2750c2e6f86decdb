"""`/api/v1/compute/secrets`: write-only secrets of the caller's organization.

Responses carry the id, name and key names, never a value. Another organization's secret is
404 `not_found`; an organization without compute gets 403 `tenant_disabled`.

Who may do what: admins and owners manage secrets (create, replace, delete); members and
viewers may only list and read them (names and key names), and members use them in their
jobs by reference. Anyone else gets 403 `permission_denied` (`IsOrgMember` with
`write_role = Role.ADMIN`).
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.api import page, page_out, validated
from apps.core.pagination import parse_page_request
from apps.secrets import selectors, services
from apps.secrets.models import Secret


class SecretOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")
    keys = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = Secret
        fields = ["id", "name", "keys", "created_at", "updated_at"]


SecretPageOut = page_out(SecretOut, "SecretPageOut")


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string"}, "example": {"HF_TOKEN": "…"}}
)
class SecretDataField(serializers.JSONField):
    """Passes the JSON through untouched: `validation.validate_data` checks keys and value
    types itself, so a number is rejected instead of being coerced to a string."""


class SecretCreateIn(serializers.Serializer):
    name = serializers.CharField(trim_whitespace=False)
    data = SecretDataField()


class SecretReplaceIn(serializers.Serializer):
    data = SecretDataField()


def _secret_of_caller(request, secret_id: str) -> Secret:
    return get_object_or_404(
        Secret.objects.for_org(caller(request).organization), public_id=secret_id
    )


class SecretListCreateView(APIView):
    permission_classes = COMPUTE_PERMISSIONS
    write_role = Role.ADMIN

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "limit", OpenApiTypes.INT, description="1..200, default 50", required=False
            ),
            OpenApiParameter(
                "cursor", OpenApiTypes.STR, description="next_cursor of the previous page"
            ),
        ],
        responses=SecretPageOut,
        operation_id="compute_secrets_list",
        summary="List secrets",
    )
    def get(self, request):
        secrets = selectors.secret_list(
            organization=caller(request).organization,
            page=parse_page_request(
                request.query_params, key_length=2, max_limit=selectors.MAX_PAGE_SIZE
            ),
        )
        return page(secrets.items, SecretOut, next_cursor=secrets.next_cursor, total=secrets.total)

    @extend_schema(
        request=SecretCreateIn,
        responses={201: SecretOut},
        operation_id="compute_secrets_create",
        summary="Create a secret",
    )
    def post(self, request):
        body = validated(SecretCreateIn, request.data)
        secret = services.secret_create(organization=caller(request).organization, **body)
        return Response(SecretOut(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(APIView):
    permission_classes = COMPUTE_PERMISSIONS
    write_role = Role.ADMIN

    @extend_schema(
        responses=SecretOut,
        operation_id="compute_secrets_retrieve",
        summary="Get a secret (key names only)",
    )
    def get(self, request, secret_id: str):
        return Response(SecretOut(_secret_of_caller(request, secret_id)).data)

    @extend_schema(
        request=SecretReplaceIn,
        responses=SecretOut,
        operation_id="compute_secrets_replace",
        summary="Replace a secret's values",
    )
    def put(self, request, secret_id: str):
        secret = _secret_of_caller(request, secret_id)
        data = validated(SecretReplaceIn, request.data)["data"]
        secret = services.secret_replace(secret=secret, data=data)
        return Response(SecretOut(secret).data)

    @extend_schema(
        responses={204: None}, operation_id="compute_secrets_delete", summary="Delete a secret"
    )
    def delete(self, request, secret_id: str):
        services.secret_delete(secret=_secret_of_caller(request, secret_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
