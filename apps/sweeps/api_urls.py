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
    # The same sweep by its id alone (the command line's `sweep show` and `sweep cancel`).
    path("sweeps/<str:sweep_id>", api.SweepByIdView.as_view(), name="api-sweep"),
    path(
        "sweeps/<str:sweep_id>/cancel", api.SweepByIdCancelView.as_view(), name="api-sweep-cancel"
    ),
]
