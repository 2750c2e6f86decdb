from django.urls import path

from apps.projects import views

urlpatterns = [
    path("o/<slug:org_slug>/projects/", views.project_list, name="project-list"),
    path("o/<slug:org_slug>/projects/new/", views.project_create, name="project-create"),
]
