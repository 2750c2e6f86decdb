from django.urls import path

from apps.sweeps import api

urlpatterns = [
    path(
        "projects/<str:project_id>/sweeps",
        api.SweepCollectionView.as_view(),
        name="api-project-sweeps",
    ),
    path(
        "projects/<str:project_id>/sweeps/<str:sweep_id>",
        api.SweepDetailView.as_view(),
        name="api-project-sweep",
    ),
    path(
        "projects/<str:project_id>/sweeps/<str:sweep_id>/cancel",
        api.SweepCancelView.as_view(),
        name="api-project-sweep-cancel",
    ),
]
