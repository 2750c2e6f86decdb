from django.urls import path

from apps.jobs.api import jobs, log_text, metrics, quotes

urlpatterns = [
    path("catalog/quotes", quotes.QuoteView.as_view(), name="api-quotes"),
    path("market/ladder", quotes.LadderView.as_view(), name="api-market-ladder"),
    path("jobs", jobs.JobCollectionView.as_view(), name="api-jobs"),
    path("jobs/plan", jobs.JobPlanView.as_view(), name="api-jobs-plan"),
    path("jobs/<str:job_id>", jobs.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/terminate", jobs.JobTerminateView.as_view(), name="api-job-terminate"),
    path("jobs/<str:job_id>/logs", jobs.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<str:job_id>/logs.txt", log_text.JobLogTextView.as_view(), name="api-job-log-text"),
    path("jobs/<str:job_id>/events", jobs.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/metrics", metrics.JobMetricsView.as_view(), name="api-job-metrics"),
    path("jobs/<str:job_id>/artifacts", jobs.JobArtifactsView.as_view(), name="api-job-artifacts"),
    path(
        "jobs/<str:job_id>/artifacts/<str:artifact_id>/download",
        jobs.JobArtifactDownloadView.as_view(),
        name="api-job-artifact-download",
    ),
]
