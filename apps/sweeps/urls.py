from django.urls import path

from apps.sweeps import views

urlpatterns = [
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/sweeps/",
        views.project_sweeps,
        name="project-sweeps",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/sweeps/new/",
        views.sweep_new,
        name="sweep-new",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/sweeps/<str:sweep_id>/",
        views.sweep_detail,
        name="sweep-detail",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/sweeps/<str:sweep_id>/cancel/",
        views.sweep_cancel,
        name="sweep-cancel",
    ),
]
