from django.urls import path

from apps.jobs import runner_api, runner_artifacts_api, runner_inputs_api

urlpatterns = [
    path("jobs/<str:job_id>/spec", runner_api.spec, name="runner-spec"),
    path("jobs/<str:job_id>/started", runner_api.started, name="runner-started"),
    path("jobs/<str:job_id>/heartbeat", runner_api.heartbeat, name="runner-heartbeat"),
    path("jobs/<str:job_id>/logs", runner_api.logs, name="runner-logs"),
    path("jobs/<str:job_id>/exit", runner_api.exit_, name="runner-exit"),
    path(
        "jobs/<str:job_id>/artifacts",
        runner_artifacts_api.upload,
        name="runner-artifacts",
    ),
    path(
        "jobs/<str:job_id>/artifacts/<int:artifact_id>/download",
        runner_artifacts_api.download,
        name="runner-artifact-download",
    ),
    path(
        "jobs/<str:job_id>/datasets/<str:dataset_id>/download",
        runner_inputs_api.download_dataset,
        name="runner-dataset-download",
    ),
]
