from django.urls import path

from apps.jobs import operator_api

urlpatterns = [
    path(
        "jobs/<str:job_id>/reclaim", operator_api.ReclaimView.as_view(), name="api-operator-reclaim"
    ),
]
