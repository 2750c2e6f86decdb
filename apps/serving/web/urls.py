from django.urls import path

from apps.serving.web import views

urlpatterns = [
    path("o/<slug:org_slug>/endpoints/", views.endpoint_list, name="endpoint-list"),
    path(
        "o/<slug:org_slug>/endpoints/<str:endpoint_id>/",
        views.endpoint_detail,
        name="endpoint-detail",
    ),
    path(
        "o/<slug:org_slug>/endpoints/<str:endpoint_id>/swap/",
        views.endpoint_swap,
        name="endpoint-swap",
    ),
    path(
        "o/<slug:org_slug>/endpoints/<str:endpoint_id>/rollback/",
        views.endpoint_rollback,
        name="endpoint-rollback",
    ),
    path(
        "o/<slug:org_slug>/endpoints/<str:endpoint_id>/stop/",
        views.endpoint_stop,
        name="endpoint-stop",
    ),
]
