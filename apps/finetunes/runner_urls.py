"""The fine-tune's part of the runner API, under the same `/api/v1/runner/` prefix."""

from django.urls import path

from apps.finetunes import runner_api

urlpatterns = [
    path(
        "jobs/<str:job_id>/datasets/<str:dataset_id>/download",
        runner_api.download_dataset,
        name="runner-dataset-download",
    ),
]
