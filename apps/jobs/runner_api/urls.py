"""`/api/v1/runner/`: the server half of the runner protocol (docs/runner-protocol.md)."""

from django.urls import path

from apps.jobs.runner_api import artifacts, lifecycle, logs, relay, shell, workdirs

urlpatterns = [
    path("relay", relay.relay, name="runner-relay"),
    path("jobs/<str:job_id>/spec", lifecycle.spec, name="runner-spec"),
    path("jobs/<str:job_id>/started", lifecycle.started, name="runner-started"),
    path("jobs/<str:job_id>/heartbeat", lifecycle.heartbeat, name="runner-heartbeat"),
    path("jobs/<str:job_id>/logs", logs.logs, name="runner-logs"),
    path("jobs/<str:job_id>/exit", lifecycle.exit_, name="runner-exit"),
    path("jobs/<str:job_id>/artifacts", artifacts.upload, name="runner-artifacts"),
    path(
        "jobs/<str:job_id>/artifacts/<int:artifact_id>/download",
        artifacts.download,
        name="runner-artifact-download",
    ),
    path(
        "jobs/<str:job_id>/workdirs/<str:workdir_id>/download",
        workdirs.download,
        name="runner-workdir-download",
    ),
    path("jobs/<str:job_id>/ssh/accept", shell.accept, name="runner-shell-accept"),
    path("jobs/<str:job_id>/ssh/<str:sid>/down", shell.down, name="runner-shell-down"),
    path("jobs/<str:job_id>/ssh/<str:sid>/up", shell.up, name="runner-shell-up"),
]
