"""`/api/v1/endpoints`: create, list, read, set the target (a new revision), roll back, stop,
and usage by key and day. One view per operation; each calls one service or selector.
Another organization's endpoint is a 404."""

from __future__ import annotations

import re

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from apps.accounts.permissions import caller
from apps.core.api_errors import first_validation_error
from apps.core.errors import InvalidRequest
from apps.core.money import micros_to_usd
from apps.core.pagination import created_page, parse_page_request
from apps.core.serializers import StrictSerializer
from apps.jobs.api.jobs import ComputeView
from apps.jobs.artifacts.store import public_artifact_id
from apps.serving import selectors, services
from apps.serving.models import Endpoint, EndpointRevision, Promotion

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


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data if isinstance(data, dict) else {})
    if not serializer.is_valid():
        param, message = first_validation_error(serializer.errors)
        raise InvalidRequest(message, param=param)
    return dict(serializer.validated_data)


def _who(request) -> services.Who:
    resolved = caller(request)
    return services.Who(user=resolved.user, key=resolved.api_key)


def revision_data(revision: EndpointRevision | None) -> dict | None:
    if revision is None:
        return None
    artifact = revision.artifact
    return {
        "number": revision.number,
        "label": revision.label,
        "served_name": revision.served_name,
        "state": revision.state,
        "artifact": public_artifact_id(artifact) if artifact else None,
        "artifact_kind": artifact.kind if artifact else None,
        "artifact_step": artifact.step if artifact else None,
        "job_id": artifact.job.public_id if artifact else None,
        "hub": {"revision": revision.hub_revision, "commit": revision.hub_commit.oid}
        if revision.hub_commit
        else None,
        "error_message": revision.error_message or None,
        "created_at": revision.created_at,
        "ready_at": revision.ready_at,
    }


def _promotion_data(promotion: Promotion) -> dict:
    who = promotion.by_user.email if promotion.by_user else None
    if who is None and promotion.by_key:
        who = promotion.by_key.prefix
    return {
        "revision": promotion.revision.number,
        "replaced": promotion.replaced.number if promotion.replaced else None,
        "kind": promotion.kind,
        "by": who,
        "at": promotion.at,
    }


def endpoint_data(endpoint: Endpoint, *, detail: bool = False) -> dict:
    data = {
        "id": endpoint.public_id,
        "object": "endpoint",
        "name": endpoint.name,
        "project": endpoint.project.public_id,
        "base_model": endpoint.base_model,
        "compute": endpoint.compute,
        "state": selectors.endpoint_state(endpoint),
        "job_id": endpoint.job.public_id if endpoint.job else None,
        "current_revision": revision_data(endpoint.current_revision),
        "previous_revision": revision_data(endpoint.previous_revision),
        "accrued_usd": micros_to_usd(endpoint.job.accrued_micros) if endpoint.job else 0.0,
        "created_at": endpoint.created_at,
        "stopped_at": endpoint.stopped_at,
    }
    if detail:
        revisions = endpoint.revisions.select_related("artifact__job", "hub_commit").order_by(
            "-number"
        )
        data["revisions"] = [revision_data(revision) for revision in revisions]
        promotions = endpoint.promotions.select_related(
            "revision", "replaced", "by_user", "by_key"
        )[:100]
        data["promotions"] = [_promotion_data(promotion) for promotion in promotions]
    return data


def _endpoint_of_caller(request, endpoint_id: str) -> Endpoint:
    endpoint = selectors.endpoint_for_org(caller(request).organization, endpoint_id)
    if endpoint is None:
        raise Http404("No such endpoint.")
    return endpoint


class EndpointCollectionView(ComputeView):
    @extend_schema(
        request=EndpointCreateIn,
        responses={201: OpenApiTypes.OBJECT},
        summary="Create an endpoint serving an adapter or checkpoint",
        operation_id="endpoints_create",
    )
    def post(self, request):
        data = _valid(EndpointCreateIn, request.data)
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
        return Response(endpoint_data(endpoint, detail=True), status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT},
        parameters=[
            OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
            OpenApiParameter("cursor", OpenApiTypes.STR),
        ],
        summary="List endpoints",
        operation_id="endpoints_list",
    )
    def get(self, request):
        page = parse_page_request(request.query_params, key_length=2, default_order="desc")
        rows, next_cursor = created_page(
            selectors.endpoints_for_org(caller(request).organization), page
        )
        return Response(
            {
                "object": "list",
                "data": [endpoint_data(endpoint) for endpoint in rows],
                "next_cursor": next_cursor,
            }
        )


class EndpointDetailView(ComputeView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT}, operation_id="endpoints_read")
    def get(self, request, endpoint_id: str):
        return Response(endpoint_data(_endpoint_of_caller(request, endpoint_id), detail=True))


class EndpointTargetView(ComputeView):
    @extend_schema(
        request=TargetSetIn,
        responses={202: OpenApiTypes.OBJECT},
        summary="Point the endpoint at a new target: a new revision, live once loaded",
        operation_id="endpoints_target_set",
    )
    def put(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        data = _valid(TargetSetIn, request.data)
        revision = services.endpoint_set_target(
            endpoint=endpoint, target=dict(data["target"]), who=_who(request)
        )
        endpoint = _endpoint_of_caller(request, endpoint_id)
        body = endpoint_data(endpoint, detail=True)
        body["revision"] = revision_data(revision)
        return Response(body, status=status.HTTP_202_ACCEPTED)


class EndpointRollbackView(ComputeView):
    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT},
        summary="Flip back to the previous revision",
        operation_id="endpoints_rollback",
    )
    def post(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        services.endpoint_rollback(endpoint=endpoint, who=_who(request))
        return Response(endpoint_data(_endpoint_of_caller(request, endpoint_id), detail=True))


class EndpointStopView(ComputeView):
    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT},
        summary="Stop the endpoint (its serve job ends; billing stops)",
        operation_id="endpoints_stop",
    )
    def post(self, request, endpoint_id: str):
        endpoint = _endpoint_of_caller(request, endpoint_id)
        services.endpoint_stop(endpoint=endpoint)
        return Response(endpoint_data(_endpoint_of_caller(request, endpoint_id), detail=True))


class EndpointUsageView(ComputeView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT},
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
        return Response({"object": "list", "endpoint": endpoint.public_id, "data": rows})
