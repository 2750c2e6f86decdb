from django.urls import path

from apps.projects import api

urlpatterns = [
    path("whoami", api.WhoamiView.as_view(), name="api-whoami"),
    path("projects", api.ProjectListCreateView.as_view(), name="api-projects"),
    path("projects/<str:project_id>", api.ProjectDetailView.as_view(), name="api-project"),
]
