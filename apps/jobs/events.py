"""The vocabulary of `JobEvent.type`: every kind of event a job records, and the groups the
job page and the API treat alike. A leaf module: it imports nothing of ours, so writers
(services, execution, telemetry, artifacts) and readers (live partials, API) share it
without importing each other."""

from __future__ import annotations

from django.db import models


class JobEventType(models.TextChoices):
    # the job's own life
    JOB_CREATED = "job_created", "Job created"
    STATE_CHANGED = "state_changed", "State changed"
    TERMINATE_REQUESTED = "terminate_requested", "Terminate requested"
    # placement and launch
    WAITING_FOR_CAPACITY = "waiting_for_capacity", "Waiting for capacity"
    PROVIDER_ALLOCATED = "provider_allocated", "Provider allocated"
    PROVIDER_QUEUED = "provider_queued", "Queued at the provider"
    QUEUE_TIMEOUT = "queue_timeout", "Queued too long at the provider"
    # the workload
    WORKLOAD_STARTED = "workload_started", "Workload started"
    WORKLOAD_EXITED = "workload_exited", "Workload exited"
    WORKLOAD_LOST = "workload_lost", "Workload lost"
    HEARTBEAT_LOST = "heartbeat_lost", "Heartbeat lost"
    # preemption and resume
    PREEMPTING = "preempting", "Preempting another job"
    PREEMPTION_REQUESTED = "preemption_requested", "Preemption requested"
    RECLAIM_REQUESTED = "reclaim_requested", "Reclaim requested"
    RESUMED_FROM_CHECKPOINT = "resumed_from_checkpoint", "Resumed from checkpoint"
    RESTARTED_FROM_BEGINNING = "restarted_from_beginning", "Restarted from the beginning"
    # outputs
    CHECKPOINT_SAVED = "checkpoint_saved", "Checkpoint saved"
    ADAPTER_UPLOADED = "adapter_uploaded", "Adapter uploaded"
    MERGED_UPLOADED = "merged_uploaded", "Merged weights uploaded"
    ARTIFACT_REFUSED = "artifact_refused", "Artifact refused"
    GRADING = "grading", "Grading"
    PUBLISHED_TO_HUB = "published_to_hub", "Published to the hub"
    PUBLISH_FAILED = "publish_failed", "Publishing to the hub failed"
    # where the workload reports its run (W&B, MLflow): the job page links to it
    TRACKER_RUN = "tracker_run", "Tracker run"
    # serving
    SERVICE_READY = "service_ready", "Server listening"
    # into the running job (SSH gateway, the job page's terminal)
    SSH_SESSION_OPENED = "ssh_session_opened", "Session opened"
    SSH_SESSION_CLOSED = "ssh_session_closed", "Session closed"


# Where a later attempt's workload picked up: the loss chart marks each one.
RESUME_EVENTS = frozenset(
    {JobEventType.RESUMED_FROM_CHECKPOINT, JobEventType.RESTARTED_FROM_BEGINNING}
)
# Events that change what the job page's outputs panel shows.
ARTIFACT_EVENTS = frozenset(
    {
        JobEventType.CHECKPOINT_SAVED,
        JobEventType.ADAPTER_UPLOADED,
        JobEventType.MERGED_UPLOADED,
        JobEventType.GRADING,
        JobEventType.PUBLISHED_TO_HUB,
        JobEventType.PUBLISH_FAILED,
    }
)
