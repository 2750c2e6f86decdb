from django.urls import path

from apps.jobs.api import operator

urlpatterns = [
    path("jobs/<str:job_id>/reclaim", operator.ReclaimView.as_view(), name="api-operator-reclaim"),
]
