"""The fine-tune job kind's hooks (`apps.jobs.kinds`): what the generic core asks of it."""

from __future__ import annotations

from apps.finetunes import inputs, payloads, publish
from apps.jobs.kinds import JobKind
from apps.jobs.models import Artifact, Attempt, Job
from runner import protocol

HOST_PATH_PREFIXES = ("/", "./", "../", "~")


class Finetune(JobKind):
    form_class = "apps.finetunes.forms.FinetuneJobForm"
    config_env = payloads.CONFIG_ENV
    create_operation = "projects_finetunes_create"

    def rerun_request(self, job: Job) -> dict:
        """The fine-tune request (trainer config and job basics), not the container job
        underneath: overrides name `learning_rate`, `max_steps`, … as the API does."""
        return payloads.request_of(job)

    def rerun_payload(self, job: Job, body: dict) -> dict:
        return payloads.payload_from_api(body, project=job.project)

    def runner_inputs(self, job: Job) -> tuple[list[inputs.RunnerInput], dict[str, str]]:
        """The uploaded dataset the config names, and the config pointing at its copy."""
        return inputs.runner_inputs(job)

    def training_config(self, job: Job) -> dict | None:
        return payloads.config_of(job)

    def failure_reason(self, job: Job, exit_code: int) -> str:
        """The trainer exits 3 when it graded its own adapter and the grade failed."""
        if exit_code == protocol.EXIT_GRADING_FAILED:
            return "grading_failed"
        return super().failure_reason(job, exit_code)

    def host_paths(self, job: Job) -> list[str]:
        """The model and dataset the config names as paths on the host (not hub ids, not
        uploaded datasets)."""
        config = payloads.config_of(job) or {}
        return [
            value
            for value in (config.get("model"), config.get("dataset"))
            if isinstance(value, str) and value.strip().startswith(HOST_PATH_PREFIXES)
        ]

    def exit_is_final(self, job: Job, attempt: Attempt, exit_code: int | None) -> bool:
        """A fine-tune told to stop while already writing its final adapter finishes instead
        (the trainer ignores SIGUSR1 then): its exit is the real outcome."""
        if exit_code == protocol.EXIT_GRADING_FAILED:
            return True
        return (
            exit_code == 0
            and Artifact.objects.filter(
                job=job, attempt=attempt.number, kind=Artifact.Kind.ADAPTER
            ).exists()
        )

    def succeeded(self, job: Job) -> None:
        """Publish the adapter (and the checkpoints, as tags) to the organization's hub."""
        publish.publish_adapter(job)
