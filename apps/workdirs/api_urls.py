from django.urls import path

from apps.workdirs import api

urlpatterns = [
    path("compute/workdirs", api.WorkdirCollectionView.as_view(), name="api-workdirs"),
    path("compute/workdirs/<str:workdir_id>", api.WorkdirDetailView.as_view(), name="api-workdir"),
]
