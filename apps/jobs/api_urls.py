from django.urls import path

from apps.jobs import api

urlpatterns = [
    path("jobs", api.JobCollectionView.as_view(), name="api-jobs"),
    path("jobs/<str:job_id>", api.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/terminate", api.JobTerminateView.as_view(), name="api-job-terminate"),
    path("jobs/<str:job_id>/logs", api.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<str:job_id>/events", api.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/artifacts", api.JobArtifactsView.as_view(), name="api-job-artifacts"),
    path(
        "jobs/<str:job_id>/artifacts/<str:artifact_id>/download",
        api.JobArtifactDownloadView.as_view(),
        name="api-job-artifact-download",
    ),
]
