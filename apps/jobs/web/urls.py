from django.urls import path

from apps.jobs.web import compare, dashboard, new_job, views

urlpatterns = [
    path("o/<slug:org_slug>/", dashboard.overview, name="overview"),
    path("o/<slug:org_slug>/jobs/", dashboard.org_jobs, name="org-jobs"),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/",
        views.project_detail,
        name="project-detail",
    ),
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/jobs/new/",
        new_job.job_new,
        name="job-new",
    ),
    path("o/<slug:org_slug>/quote/", new_job.job_quote, name="job-quote"),
    # Before `jobs/<str:job_id>/`, which would take `compare` for a job id.
    path("o/<slug:org_slug>/jobs/compare/", compare.jobs_compare, name="jobs-compare"),
    path(
        "o/<slug:org_slug>/jobs/compare/live/", compare.jobs_compare_live, name="jobs-compare-live"
    ),
    path("o/<slug:org_slug>/jobs/<str:job_id>/", views.job_detail, name="job-detail"),
    path("o/<slug:org_slug>/jobs/<str:job_id>/live/", views.job_live, name="job-live"),
    path("o/<slug:org_slug>/jobs/<str:job_id>/logs/", views.job_logs_older, name="job-logs-older"),
    path(
        "o/<slug:org_slug>/jobs/<str:job_id>/logs.txt",
        views.job_log_download,
        name="job-log-download",
    ),
    path("o/<slug:org_slug>/jobs/<str:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("o/<slug:org_slug>/jobs/<str:job_id>/rerun/", views.job_rerun, name="job-rerun"),
    path(
        "o/<slug:org_slug>/jobs/<str:job_id>/artifacts/<int:artifact_id>/download/",
        views.job_artifact_download,
        name="job-artifact-download",
    ),
]
