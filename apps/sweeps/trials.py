"""The job request a sweep's template makes, and the one way a trial's job is created.

A fine-tune template is the body `POST /projects/{id}/finetunes` takes and goes through the
same `payloads.payload_from_api`; a container template is the body `POST /compute/jobs`
takes, pinned to the sweep's project. Both are then checked by `validate_job_request`, the
API's own validation, so a value a sweep accepts is one the API would accept.
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.accounts.models import Organization
from apps.core.errors import ApiError, InvalidRequest
from apps.finetunes import payloads
from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.projects.models import Project
from apps.sweeps import space
from apps.sweeps.models import Sweep, Trial


def job_request(*, kind: str, body: object, project: Project) -> dict:
    """The `POST /compute/jobs` request a template body makes; raises InvalidRequest (or
    another ApiError) naming the field, exactly as the API would."""
    if kind == Sweep.Kind.FINETUNE:
        return payloads.payload_from_api(body, project=project)
    if not isinstance(body, dict):
        raise InvalidRequest("The template must be a JSON object.", param="template")
    return {**body, "project": project.public_id}


def validate(*, kind: str, body: object, project: Project, organization: Organization) -> dict:
    """`job_request` of `body`, validated as `POST /compute/jobs` validates it; the
    normalised spec."""
    request = job_request(kind=kind, body=body, project=project)
    return job_services.validate_job_request(organization=organization, payload=request)


def idempotency_key(sweep: Sweep, index: int) -> str:
    """The Idempotency-Key of trial `index`'s job: a scheduler that runs twice (a task
    redelivered, the outcome hook and the beat pass at once) finds the job the first run made."""
    return f"sweep:{sweep.public_id}:{index}"


def job_name(sweep: Sweep, trial: Trial) -> str:
    values = " ".join(f"{path.rsplit('.', 1)[-1]}={value}" for path, value in trial.values.items())
    return f"{sweep.name} #{trial.index} {values}"[:200]


@dataclass(frozen=True)
class Started:
    job: Job | None
    error: str = ""
    # A refusal that passes (the organization's waiting-jobs limit, 429): try again later.
    retry_later: bool = False


def start(sweep: Sweep, trial: Trial) -> Started:
    """Create trial's job through `jobs.services.job_create`, keyed by the sweep and the
    trial's index. A refusal (a budget exhausted, a price no offer meets) is returned as
    the error, not raised: the trial records it and the sweep goes on with the rest; one
    that passes (too many jobs waiting) is marked `retry_later`."""
    body = space.apply(sweep.template, trial.values)
    if isinstance(body, dict) and "name" in body:
        body["name"] = job_name(sweep, trial)
    kind = Job.Kind.FINETUNE if sweep.kind == Sweep.Kind.FINETUNE else Job.Kind.CONTAINER
    try:
        request = job_request(kind=sweep.kind, body=body, project=sweep.project)
        created = job_services.job_create(
            organization=sweep.organization,
            payload=request,
            idempotency_key=idempotency_key(sweep, trial.index),
            created_by=sweep.created_by,
            created_by_key=sweep.created_by_key,
            kind=kind,
        )
    except ApiError as error:
        return Started(None, str(error.detail), retry_later=error.status_code == 429)
    return Started(created.job)
