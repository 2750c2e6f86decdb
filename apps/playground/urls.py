from django.urls import path

from apps.playground import views

urlpatterns = [
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/playground/",
        views.playground,
        name="playground",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/playground/run",
        views.playground_run,
        name="playground-run",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/playground/status",
        views.playground_status,
        name="playground-status",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/playground/deploy",
        views.playground_deploy,
        name="playground-deploy",
    ),
]
