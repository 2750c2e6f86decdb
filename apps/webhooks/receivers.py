"""What the webhooks app hears from the apps below it, turned into published events.

Each receiver keys its event on what happened (the job and the state it reached at that
attempt, the budget notice, the endpoint's revision), so a signal told twice publishes one
event (`services.event_publish` writes one delivery per webhook and event).
"""

from __future__ import annotations

from django.dispatch import receiver

from apps.billing.signals import budget_threshold
from apps.jobs.models import Job
from apps.jobs.signals import job_outcome
from apps.jobs.states import JobState
from apps.serving import selectors as serving_selectors
from apps.serving.models import Endpoint
from apps.serving.signals import endpoint_failed, endpoint_ready
from apps.webhooks import envelopes, services
from apps.webhooks.events import EventType

JOB_EVENTS = {
    JobState.SUCCEEDED: EventType.JOB_SUCCEEDED,
    JobState.FAILED: EventType.JOB_FAILED,
    JobState.TERMINATED: EventType.JOB_TERMINATED,
    JobState.PREEMPTED: EventType.JOB_PREEMPTED,
}


@receiver(job_outcome, dispatch_uid="webhooks.job_outcome")
def on_job_outcome(sender, job, state: str, **kwargs) -> None:
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


@receiver(budget_threshold, dispatch_uid="webhooks.budget_threshold")
def on_budget_threshold(sender, notice, **kwargs) -> None:
    services.event_publish(
        organization=notice.organization,
        event_type=EventType.BUDGET_THRESHOLD,
        key=f"budget-notice:{notice.pk}",
        data=envelopes.budget_data(notice),
        created=notice.created_at,
    )


@receiver(endpoint_ready, dispatch_uid="webhooks.endpoint_ready")
def on_endpoint_ready(sender, endpoint, revision, **kwargs) -> None:
    services.event_publish(
        organization=endpoint.organization,
        event_type=EventType.ENDPOINT_READY,
        key=f"endpoint:{endpoint.public_id}:ready:{revision.number}",
        data=envelopes.endpoint_data(endpoint, revision),
    )


@receiver(endpoint_failed, dispatch_uid="webhooks.endpoint_failed")
def on_endpoint_failed(sender, endpoint, revision, message: str = "", **kwargs) -> None:
    services.event_publish(
        organization=endpoint.organization,
        event_type=EventType.ENDPOINT_FAILED,
        key=f"endpoint:{endpoint.public_id}:revision-failed:{revision.number}",
        data=envelopes.endpoint_data(endpoint, revision, message),
    )
