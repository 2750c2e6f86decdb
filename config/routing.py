"""Websocket routes."""

from django.urls import path

from apps.billing.consumers import BillingConsumer
from apps.jobs.live import consumers
from apps.jobs.web.terminal import TerminalConsumer
from apps.serving.consumers import EndpointConsumer

websocket_urlpatterns = [
    path("ws/jobs/<str:job_id>/terminal/", TerminalConsumer.as_asgi()),
    path("ws/jobs/<str:job_id>/", consumers.JobConsumer.as_asgi()),
    path("ws/projects/<str:project_id>/", consumers.ProjectJobsConsumer.as_asgi()),
    path("ws/orgs/<slug:org_slug>/overview/", consumers.OverviewConsumer.as_asgi()),
    path("ws/orgs/<slug:org_slug>/jobs/", consumers.OrgJobsConsumer.as_asgi()),
    path("ws/billing/", BillingConsumer.as_asgi()),
    path("ws/billing/<slug:org_slug>/", BillingConsumer.as_asgi()),
    path("ws/endpoints/<str:endpoint_id>/", EndpointConsumer.as_asgi()),
]
