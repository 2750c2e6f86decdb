"""Job kinds as plug-ins: what the generic core asks of a kind, found by dotted path.

The core (runner API, supervision, preemption, placement) never branches on `Job.kind`. It
calls `hooks_for(job)` and one of its hooks; a kind that needs nothing special uses the
defaults of `JobKind`. A kind's app (`apps.finetunes`, later `apps.serving`) sits above
`jobs` and subclasses `JobKind`; it is named here as a string, so `jobs` imports nothing of
it, and loaded on first use.

Each hook says who calls it. Most serve the core; `training_config` and `form_class` serve
pages only.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.utils.module_loading import import_string

from apps.jobs.models import Attempt, Job
from runner import protocol

# The job's code (`container.workdir`, `container.files`) could not be put in place: the
# runner reported EXIT_WORKDIR_INVALID before any workload started (its system line says why).
WORKDIR_INVALID = "workdir_invalid"

# A container job's own create endpoint (jobs', `POST /compute/jobs`), in the OpenAPI document.
CONTAINER_KIND = "container"
CONTAINER_CREATE_OPERATION = "compute_jobs_create"

KIND_HOOKS: dict[str, str] = {
    "finetune": "apps.finetunes.kind.Finetune",
    "serve": "apps.serving.kind.Serve",
}


class JobKind:
    """The defaults: a plain container job."""

    # True for a kind whose workload is a server the control plane calls (placed only on
    # providers whose backend `SERVES_ENDPOINTS`; its `serving` line records the port).
    # Read by execution.placement (Wants.of) and telemetry.ingestion (_record_service_port).
    serves: bool = False

    # The New Job page's form for this kind, as a dotted path to a `jobs.web.forms.JobForm`
    # subclass (a string: the form lives in the kind's app, above `jobs`); None: no tab.
    # Read by web.new_job (page_forms).
    form_class: str | None = None

    # The env entry of the spec's container that carries `training_config` as JSON (None:
    # none does). The compare page shows that config's fields in its place, so two
    # fine-tunes differ by `training.learning_rate`, not by one long JSON string.
    # Read by comparison (config_of).
    config_env: str | None = None

    def usage_resource(self, job: Job) -> tuple[str, str, str]:
        """How billing's usage names the job's minutes: (resource type, id, name).
        Called by execution.attempts (_meter_fields)."""
        return "job", job.public_id, job.name

    def service_ready(self, job: Job, attempt: int, port: int) -> None:
        """The attempt's workload announced it listens on `port` (called after commit).
        Called by telemetry.ingestion (_record_service_port)."""

    def runner_inputs(self, job: Job) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Files the runner fetches before the workload starts (the spec's `inputs`), and
        env entries that replace the job's own for the runner.
        Called by runner_api.lifecycle (spec)."""
        return [], {}

    def training_config(self, job: Job) -> dict[str, Any] | None:
        """What a training kind was asked to do (model, dataset, dataset_format, max_steps,
        learning_rate), shown in the job page's Configuration; None for other kinds.
        Called by live.partials (state_context)."""
        return None

    def failure_reason(self, job: Job, exit_code: int) -> str:
        """The job's `reason` when its workload exits with a non-zero `exit_code`.
        Called by execution.supervision (finalize)."""
        if exit_code == protocol.EXIT_WORKDIR_INVALID and workdir_never_prepared(job):
            return WORKDIR_INVALID
        return f"exit_code_{exit_code}"

    def host_paths(self, job: Job) -> list[str]:
        """Paths on the host that the workload reads (a model or dataset given as a path).
        Such a job runs only on single-tenant providers: elsewhere another organization's
        files could be named, and in a container they do not exist.
        Called by execution.placement (Wants.of)."""
        return []

    def exit_is_final(self, job: Job, attempt: Attempt, exit_code: int | None) -> bool:
        """True when an attempt that was told to checkpoint and stop ended with its real
        outcome anyway (it had finished), so the exit decides the job's fate rather than a
        preemption. Called by execution.preemption (preemption_reason)."""
        return False

    # The operation id of this kind's own create endpoint in the OpenAPI document, whose
    # request body a job file of this kind (`kind: <name>`) is; None: the kind has no job
    # file of its own (a container job's is `compute_jobs_create`, jobs' own endpoint).
    # Read by api.job_file (the job file's JSON Schema).
    create_operation: str | None = None

    def rerun_request(self, job: Job) -> dict[str, Any] | None:
        """The request body, as this kind's create endpoint takes it, that would make `job`
        again: what a re-run's overrides are merged into. None: the container job's own
        (`specs.request_from_spec`). Called by services (job_rerun)."""
        return None

    def rerun_payload(self, job: Job, body: dict[str, Any]) -> dict[str, Any]:
        """The job request (`POST /compute/jobs`'s body) for a re-run's merged `body`;
        raises InvalidRequest naming the field. Called by services (job_rerun)."""
        return body

    def succeeded(self, job: Job) -> None:
        """The job has succeeded (called in a worker after that commit; may run twice, so
        what it does must be safe to repeat). Called by tasks (job_succeeded)."""


def ships_code(job: Job) -> bool:
    """Whether the job brings code for its working directory (an archive or inline files)."""
    container = (job.spec or {}).get("container") or {}
    return bool(container.get("workdir") or container.get("files"))


def workdir_never_prepared(job: Job) -> bool:
    """An exit of EXIT_WORKDIR_INVALID is the runner's (not a workload's own exit 65) when
    the job ships code and its current attempt never reported a started workload."""
    return (
        ships_code(job)
        and not Attempt.objects.filter(
            job=job, number=job.attempt_count, started_at__isnull=False
        ).exists()
    )


@cache
def _load(path: str) -> JobKind:
    return import_string(path)()


_DEFAULT = JobKind()


def hooks_for(job: Job) -> JobKind:
    path = KIND_HOOKS.get(job.kind)
    return _load(path) if path else _DEFAULT


def registered_kinds() -> list[JobKind]:
    """The hooks of every kind in `KIND_HOOKS`, in its order (the container kind, which has
    no entry, is not among them)."""
    return [_load(path) for path in KIND_HOOKS.values()]


def job_file_kinds() -> dict[str, str]:
    """Kind name → the operation id of its create endpoint, for every kind a job file may
    describe (`kind:`): the container kind first, then each kind with a `create_operation`."""
    found = {CONTAINER_KIND: CONTAINER_CREATE_OPERATION}
    for name, path in KIND_HOOKS.items():
        if operation := _load(path).create_operation:
            found[name] = operation
    return found
