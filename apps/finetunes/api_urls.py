from django.urls import path

from apps.finetunes import api, datasets_api

urlpatterns = [
    path(
        "projects/<str:project_id>/finetunes",
        api.FinetuneCreateView.as_view(),
        name="api-project-finetunes",
    ),
    path(
        "projects/<str:project_id>/finetunes/plan",
        api.FinetunePlanView.as_view(),
        name="api-project-finetunes-plan",
    ),
    path(
        "projects/<str:project_id>/datasets",
        datasets_api.DatasetCollectionView.as_view(),
        name="api-project-datasets",
    ),
    path(
        "projects/<str:project_id>/datasets/<str:dataset_id>",
        datasets_api.DatasetDetailView.as_view(),
        name="api-project-dataset",
    ),
]
