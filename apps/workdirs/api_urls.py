from django.urls import path

from apps.workdirs import api

urlpatterns = [
    path("workdirs", api.WorkdirCollectionView.as_view(), name="api-workdirs"),
    path("workdirs/<str:workdir_id>", api.WorkdirDetailView.as_view(), name="api-workdir"),
]
