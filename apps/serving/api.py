"""`/api/v1/endpoints`: create, list, read, set the target (a new revision), roll back, stop,
and usage by key and day. One view per operation; each calls one service or selector and
renders through a serializer of `apps.serving.serializers`. The list is the one list shape,
with `"object": "list"` kept first as before. Another organization's endpoint is a 404."""

from __future__ import annotations

import re

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from apps.accounts.permissions import caller
from apps.core.api import page, validated
from apps.core.errors import InvalidRequest
from apps.core.pagination import created_page, parse_page_request
from apps.core.serializers import StrictSerializer
from apps.jobs.api.jobs import ComputeView
from apps.serving import selectors, services
from apps.serving.models import Endpoint
from apps.serving.serializers import (
    EndpointDetailOut,
    EndpointOut,
    EndpointPage,
    EndpointTargetOut,
    EndpointUsageOut,
)

MAX_USAGE_DAYS = 90


class TargetIn(StrictSerializer):
    artifact = serializers.CharField(required=False, help_text="`art_…`: an adapter or checkpoint")
    job = serializers.CharField(required=False, help_text="`job_…`: that job's final adapter")
    hub = serializers.CharField(
        required=False,
        help_text="`<org>/<name>[@revision]`: the adapter in a model repository of the "
        "organization's hub, pinned to the commit the revision names now",
    )


class EndpointCreateIn(StrictSerializer):
    name = serializers.CharField(max_length=63)
    project = serializers.CharField(max_length=32)
    base_model = serializers.CharField(max_length=500)
    target = TargetIn()
    compute = serializers.DictField(required=False)


class TargetSetIn(StrictSerializer):
    target = TargetIn()


def _who(request) -> services.Who:
    resolved = caller(request)
    return services.Who(user=resolved.user, key=resolved.api_key)


def _endpoint_of_caller(request, endpoint_id: str) -> Endpoint:
    endpoint = selectors.endpoint_for_org(caller(request).organization, endpoint_id)
    if endpoint is None:
        raise Http404("No such endpoint.")
    return endpoint


class EndpointCollectionView(ComputeView):
    @extend_schema(
        request=EndpointCreateIn,
        responses={201: EndpointDetailOut},
        summary="Create an endpoint serving an adapter or checkpoint",
        operation_id="endpoints_create",
    )
    def post(self, request):
        data = validated(EndpointCreateIn, request.data)
        endpoint = services.endpoint_create(
            organization=caller(request).organization,
            project_id=data["project"],
            name=data["name"],
            base_model=data["base_model"],
            target=dict(data["target"]),
            compute=data.get("compute"),
            who=_who(request),
        )
        endpoint = selectors.endpoint_for_org(caller(request).organization, endpoint.public_id)
        return Response(EndpointDetailOut(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses=EndpointPage,
        parameters=[
            OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
            OpenApiParameter("cursor", OpenApiTypes.STR),
        ],
        summary="List endpoints",
        operation_id="endpoints_list",
    )
    def get(self, request):
        page_request = parse_page_request(request.query_params, key_length=2, default_order="desc")
        endpoints = selectors.endpoints_for_org(caller(request).organization)
        rows, next_cursor = created_page(endpoints, page_request)
        return page(
            rows,
            EndpointOut,
            next_cursor=next_cursor,
            total=endpoints.count(),
            head={"object": "list"},
        )


class EndpointDetailView(ComputeView):
    @extend_schema(responses=EndpointDetailOut, operation_id="endpoints_read")
    def get(self, request, endpoint_id: str):
        return Response(EndpointDetailOut(_endpoint_of_caller(request, endpoint_id)).data)


class EndpointTargetView(ComputeView):
    @extend_schema(
        request=TargetSetIn,
        responses={202: EndpointTargetOut},
        summary="Point the endpoint at a new target: a new revision, live once loaded",
        operation_id="endpoints_target_set",
    )
    def put(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        data = validated(TargetSetIn, request.data)
        revision = services.endpoint_set_target(
            endpoint=endpoint, target=dict(data["target"]), who=_who(request)
        )
        endpoint = _endpoint_of_caller(request, endpoint_id)
        body = EndpointTargetOut(endpoint, context={"revision": revision}).data
        return Response(body, status=status.HTTP_202_ACCEPTED)


class EndpointRollbackView(ComputeView):
    @extend_schema(
        request=None,
        responses=EndpointDetailOut,
        summary="Flip back to the previous revision",
        operation_id="endpoints_rollback",
    )
    def post(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        services.endpoint_rollback(endpoint=endpoint, who=_who(request))
        return Response(EndpointDetailOut(_endpoint_of_caller(request, endpoint_id)).data)


class EndpointStopView(ComputeView):
    @extend_schema(
        request=None,
        responses=EndpointDetailOut,
        summary="Stop the endpoint (its serve job ends; billing stops)",
        operation_id="endpoints_stop",
    )
    def post(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        services.endpoint_stop(endpoint=endpoint)
        return Response(EndpointDetailOut(_endpoint_of_caller(request, endpoint_id)).data)


class EndpointUsageView(ComputeView):
    @extend_schema(
        responses=EndpointUsageOut,
        parameters=[OpenApiParameter("days", OpenApiTypes.INT, description="1 to 90, default 30")],
        summary="Requests, tokens, errors and latency by API key and day",
        operation_id="endpoints_usage",
    )
    def get(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        raw = request.query_params.get("days") or "30"
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        if not re.fullmatch(r"[0-9]{1,3}", raw) or not 1 <= int(raw) <= MAX_USAGE_DAYS:
            raise InvalidRequest(f"days is 1 to {MAX_USAGE_DAYS}.", param="days")
        rows = selectors.usage_by_key_and_day(
            endpoint, since=selectors.default_usage_since(int(raw))
        )
        body = {"object": "list", "endpoint": endpoint.public_id, "data": rows}
        return Response(EndpointUsageOut(body).data)
