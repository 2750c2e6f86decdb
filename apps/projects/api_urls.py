from django.urls import path

from apps.jobs.api import FinetuneCreateView
from apps.projects import api

urlpatterns = [
    path("projects", api.ProjectListCreateView.as_view(), name="api-projects"),
    path("projects/<str:project_id>", api.ProjectDetailView.as_view(), name="api-project"),
    path(
        "projects/<str:project_id>/finetunes",
        FinetuneCreateView.as_view(),
        name="api-project-finetunes",
    ),
]
