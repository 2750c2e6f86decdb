"""The New Job page and its live quote (`apps.jobs.new_job`)."""

from django.urls import path

from apps.jobs import new_job

urlpatterns = [
    path(
        "o/<slug:org_slug>/projects/<slug:project_slug>/jobs/new/",
        new_job.job_new,
        name="job-new",
    ),
    path("o/<slug:org_slug>/quote/", new_job.job_quote, name="job-quote"),
]
