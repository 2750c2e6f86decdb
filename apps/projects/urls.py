from django.urls import path

from apps.projects import views

urlpatterns = [
    path("o/<slug:org_slug>/projects/", views.project_list, name="project-list"),
    path("o/<slug:org_slug>/projects/new/", views.project_create, name="project-create"),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/",
        views.project_detail,
        name="project-detail",
    ),
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
