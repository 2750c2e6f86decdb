"""The hooks jobs, billing and serving call by dotted path (`apps.jobs.outcomes`,
`apps.billing.threshold_hooks`, `apps.serving.endpoint_hooks`), turned into published events.

Each hook keys its event on what happened (the job and the state it reached at that
attempt, the budget notice, the endpoint's revision), so an outcome told twice publishes one
event (`services.event_publish` writes one delivery per webhook and event).
"""

from __future__ import annotations

from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.serving import selectors as serving_selectors
from apps.serving.models import Endpoint
from apps.webhooks import envelopes, services
from apps.webhooks.events import EventType

JOB_EVENTS = {
    JobState.SUCCEEDED: EventType.JOB_SUCCEEDED,
    JobState.FAILED: EventType.JOB_FAILED,
    JobState.TERMINATED: EventType.JOB_TERMINATED,
    JobState.PREEMPTED: EventType.JOB_PREEMPTED,
}


def job_outcome(*, job: Job, state: str) -> None:
    """`apps.jobs.outcomes` hook."""
    event_type = JOB_EVENTS.get(state)
    if event_type is None:
        return
    services.event_publish(
        organization=job.organization,
        event_type=event_type,
        key=f"job:{job.public_id}:{state}:{job.attempt_count}",
        data=envelopes.job_data(job, state),
    )
    if job.kind == Job.Kind.SERVE and state != JobState.PREEMPTED:
        _serve_job_ended(job)


def _serve_job_ended(job: Job) -> None:
    """An endpoint whose serve job ended without being stopped has failed."""
    endpoint = Endpoint.objects.select_related("organization", "job").filter(job=job).first()
    if endpoint is None or serving_selectors.endpoint_state(endpoint) != Endpoint.State.FAILED:
        return
    services.event_publish(
        organization=endpoint.organization,
        event_type=EventType.ENDPOINT_FAILED,
        key=f"endpoint:{endpoint.public_id}:job:{job.public_id}:{job.attempt_count}",
        data=envelopes.endpoint_data(
            endpoint, endpoint.current_revision, f"Its serve job {job.state} ({job.reason})."
        ),
    )


def budget_threshold(*, notice) -> None:
    """`apps.billing.threshold_hooks` hook."""
    services.event_publish(
        organization=notice.organization,
        event_type=EventType.BUDGET_THRESHOLD,
        key=f"budget-notice:{notice.pk}",
        data=envelopes.budget_data(notice),
        created=notice.created_at,
    )


def endpoint_ready(*, endpoint: Endpoint, revision) -> None:
    """`apps.serving.endpoint_hooks` hook."""
    services.event_publish(
        organization=endpoint.organization,
        event_type=EventType.ENDPOINT_READY,
        key=f"endpoint:{endpoint.public_id}:ready:{revision.number}",
        data=envelopes.endpoint_data(endpoint, revision),
    )


def endpoint_failed(*, endpoint: Endpoint, revision, message: str = "") -> None:
    """`apps.serving.endpoint_hooks` hook."""
    services.event_publish(
        organization=endpoint.organization,
        event_type=EventType.ENDPOINT_FAILED,
        key=f"endpoint:{endpoint.public_id}:revision-failed:{revision.number}",
        data=envelopes.endpoint_data(endpoint, revision, message),
    )
