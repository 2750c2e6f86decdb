from django.urls import path

from apps.jobs.api import compare, job_file, jobs, log_text, metrics, operator, quotes

urlpatterns = [
    path("compute/catalog/quotes", quotes.QuoteView.as_view(), name="api-quotes"),
    path("compute/market/ladder", quotes.LadderView.as_view(), name="api-market-ladder"),
    path("compute/jobs", jobs.JobCollectionView.as_view(), name="api-jobs"),
    path("compute/jobs/plan", jobs.JobPlanView.as_view(), name="api-jobs-plan"),
    path("compute/jobs/schema", job_file.JobFileSchemaView.as_view(), name="api-jobs-schema"),
    path("compute/jobs/compare", compare.JobCompareView.as_view(), name="api-jobs-compare"),
    path("compute/jobs/<str:job_id>", jobs.JobDetailView.as_view(), name="api-job"),
    path(
        "compute/jobs/<str:job_id>/terminate",
        jobs.JobTerminateView.as_view(),
        name="api-job-terminate",
    ),
    path("compute/jobs/<str:job_id>/rerun", jobs.JobRerunView.as_view(), name="api-job-rerun"),
    path("compute/jobs/<str:job_id>/logs", jobs.JobLogsView.as_view(), name="api-job-logs"),
    path(
        "compute/jobs/<str:job_id>/logs.txt",
        log_text.JobLogTextView.as_view(),
        name="api-job-log-text",
    ),
    path("compute/jobs/<str:job_id>/events", jobs.JobEventsView.as_view(), name="api-job-events"),
    path(
        "compute/jobs/<str:job_id>/metrics",
        metrics.JobMetricsView.as_view(),
        name="api-job-metrics",
    ),
    path(
        "compute/jobs/<str:job_id>/artifacts",
        jobs.JobArtifactsView.as_view(),
        name="api-job-artifacts",
    ),
    path(
        "compute/jobs/<str:job_id>/artifacts/<str:artifact_id>/download",
        jobs.JobArtifactDownloadView.as_view(),
        name="api-job-artifact-download",
    ),
    # What an operator (a staff API key) may do to any organization's job.
    path(
        "operator/jobs/<str:job_id>/reclaim",
        operator.ReclaimView.as_view(),
        name="api-operator-reclaim",
    ),
]
