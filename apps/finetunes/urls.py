from django.urls import path

from apps.finetunes import views

urlpatterns = [
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/datasets/",
        views.project_datasets,
        name="project-datasets",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/datasets/<str:dataset_id>/",
        views.project_dataset,
        name="project-dataset",
    ),
]
