from django.urls import path

from apps.serving import api

urlpatterns = [
    path("endpoints", api.EndpointCollectionView.as_view(), name="api-endpoints"),
    path("endpoints/<str:endpoint_id>", api.EndpointDetailView.as_view(), name="api-endpoint"),
    path(
        "endpoints/<str:endpoint_id>/target",
        api.EndpointTargetView.as_view(),
        name="api-endpoint-target",
    ),
    path(
        "endpoints/<str:endpoint_id>/rollback",
        api.EndpointRollbackView.as_view(),
        name="api-endpoint-rollback",
    ),
    path(
        "endpoints/<str:endpoint_id>/stop", api.EndpointStopView.as_view(), name="api-endpoint-stop"
    ),
    path(
        "endpoints/<str:endpoint_id>/usage",
        api.EndpointUsageView.as_view(),
        name="api-endpoint-usage",
    ),
]
