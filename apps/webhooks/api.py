"""`/api/v1/webhooks`: the organization's webhooks and their delivery logs.

Admins and owners only, for reading as well (a webhook's URL may carry a token): a member
or viewer gets 403 `permission_denied`. Another organization's webhook is 404
`not_found`. The signing secret is in the answer to a create and to `rotate-secret` only.
A refused URL is 400 with `param: "url"` and `webhook_url_invalid`,
`webhook_url_unresolvable` or `webhook_url_forbidden`.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import caller
from apps.core.api import page, page_out, validated
from apps.core.errors import NotFound
from apps.core.pagination import parse_page_request
from apps.webhooks import selectors, services
from apps.webhooks.events import SUBSCRIBABLE
from apps.webhooks.models import Delivery, DeliveryAttempt, Webhook

MAX_PAGE_SIZE = 100


class IsOrgAdmin(permissions.BasePermission):
    """Admins and owners of the caller's organization, for every method."""

    message = "Only admins and owners manage webhooks."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        return caller(request).can(Role.ADMIN)


PERMISSIONS = [IsOrgAdmin]


class WebhookOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")
    events = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = Webhook
        fields = [
            "id",
            "url",
            "description",
            "events",
            "format",
            "enabled",
            "created_at",
            "updated_at",
        ]


class WebhookWithSecretOut(WebhookOut):
    secret = serializers.CharField(help_text="Shown once: store it to verify signatures.")

    class Meta(WebhookOut.Meta):
        fields = [*WebhookOut.Meta.fields, "secret"]


WebhookPageOut = page_out(WebhookOut, "WebhookPageOut")


class WebhookIn(serializers.Serializer):
    url = serializers.CharField(max_length=2000)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=SUBSCRIBABLE), allow_empty=False
    )
    format = serializers.ChoiceField(choices=Webhook.Format.choices, default=Webhook.Format.JSON)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False, default=True)


class WebhookPatchIn(serializers.Serializer):
    url = serializers.CharField(max_length=2000, required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=SUBSCRIBABLE), allow_empty=False, required=False
    )
    format = serializers.ChoiceField(choices=Webhook.Format.choices, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class DeliveryAttemptOut(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "duration_ms", "response_code", "error"]


class DeliveryOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")
    attempt_log = DeliveryAttemptOut(source="attempt_rows", many=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "event_id",
            "event_type",
            "status",
            "attempts",
            "response_code",
            "last_error",
            "next_attempt_at",
            "created_at",
            "finished_at",
            "attempt_log",
        ]


DeliveryPageOut = page_out(DeliveryOut, "WebhookDeliveryPageOut")

PAGE_PARAMETERS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="1..100, default 50", required=False),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


def _webhook_of_caller(request, webhook_id: str) -> Webhook:
    webhook = selectors.webhook_for_org(caller(request).organization, webhook_id)
    if webhook is None:
        raise NotFound("No such webhook.")
    return webhook


def _with_secret(webhook: Webhook, secret: str) -> dict:
    return {**WebhookOut(webhook).data, "secret": secret}


class WebhookListCreateView(APIView):
    permission_classes = PERMISSIONS

    @extend_schema(responses=WebhookPageOut, operation_id="webhooks_list", summary="List webhooks")
    def get(self, request):
        webhooks = list(selectors.webhooks_for_org(caller(request).organization))
        return page(webhooks, WebhookOut, next_cursor=None, total=len(webhooks))

    @extend_schema(
        request=WebhookIn,
        responses={201: WebhookWithSecretOut},
        operation_id="webhooks_create",
        summary="Create a webhook (the answer carries its secret, once)",
    )
    def post(self, request):
        body = validated(WebhookIn, request.data)
        who = caller(request)
        webhook, secret = services.webhook_create(
            organization=who.organization, created_by=who.user, **body
        )
        return Response(_with_secret(webhook, secret), status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    permission_classes = PERMISSIONS

    @extend_schema(responses=WebhookOut, operation_id="webhooks_retrieve", summary="Get a webhook")
    def get(self, request, webhook_id: str):
        return Response(WebhookOut(_webhook_of_caller(request, webhook_id)).data)

    @extend_schema(
        request=WebhookPatchIn,
        responses=WebhookOut,
        operation_id="webhooks_update",
        summary="Change a webhook's URL, events, format, description or enabled flag",
    )
    def patch(self, request, webhook_id: str):
        webhook = _webhook_of_caller(request, webhook_id)
        changes = validated(WebhookPatchIn, request.data, partial=True)
        webhook = services.webhook_update(webhook=webhook, **changes)
        return Response(WebhookOut(webhook).data)

    @extend_schema(
        responses={204: None}, operation_id="webhooks_delete", summary="Delete a webhook"
    )
    def delete(self, request, webhook_id: str):
        services.webhook_delete(webhook=_webhook_of_caller(request, webhook_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookTestView(APIView):
    permission_classes = PERMISSIONS

    @extend_schema(
        request=None,
        responses={202: DeliveryOut},
        operation_id="webhooks_test",
        summary="Send a `ping` delivery now",
    )
    def post(self, request, webhook_id: str):
        delivery = services.webhook_ping(webhook=_webhook_of_caller(request, webhook_id))
        return Response(DeliveryOut(delivery).data, status=status.HTTP_202_ACCEPTED)


class WebhookRotateSecretView(APIView):
    permission_classes = PERMISSIONS

    @extend_schema(
        request=None,
        responses=WebhookWithSecretOut,
        operation_id="webhooks_rotate_secret",
        summary="Replace the signing secret (the answer carries the new one, once)",
    )
    def post(self, request, webhook_id: str):
        webhook, secret = services.webhook_rotate_secret(
            webhook=_webhook_of_caller(request, webhook_id)
        )
        return Response(_with_secret(webhook, secret))


class WebhookDeliveriesView(APIView):
    permission_classes = PERMISSIONS

    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=DeliveryPageOut,
        operation_id="webhooks_deliveries",
        summary="The webhook's delivery log, newest first",
    )
    def get(self, request, webhook_id: str):
        webhook = _webhook_of_caller(request, webhook_id)
        items, next_cursor, total = selectors.delivery_page(
            webhook=webhook,
            page=parse_page_request(request.query_params, key_length=2, max_limit=MAX_PAGE_SIZE),
        )
        return page(items, DeliveryOut, next_cursor=next_cursor, total=total)
