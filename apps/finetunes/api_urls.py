from django.urls import path

from apps.finetunes import api

urlpatterns = [
    path(
        "projects/<str:project_id>/finetunes",
        api.FinetuneCreateView.as_view(),
        name="api-project-finetunes",
    ),
]
