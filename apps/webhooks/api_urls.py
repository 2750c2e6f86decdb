from django.urls import path

from apps.webhooks import api

urlpatterns = [
    path("webhooks", api.WebhookListCreateView.as_view(), name="api-webhooks"),
    path("webhooks/<str:webhook_id>", api.WebhookDetailView.as_view(), name="api-webhook"),
    path("webhooks/<str:webhook_id>/test", api.WebhookTestView.as_view(), name="api-webhook-test"),
    path(
        "webhooks/<str:webhook_id>/rotate-secret",
        api.WebhookRotateSecretView.as_view(),
        name="api-webhook-rotate-secret",
    ),
    path(
        "webhooks/<str:webhook_id>/deliveries",
        api.WebhookDeliveriesView.as_view(),
        name="api-webhook-deliveries",
    ),
]
