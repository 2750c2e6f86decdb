"""What a session into a job needs whoever opens it (the SSH gateway, the job page's
terminal): the grant it was opened under, the job's live attempt (or why there is none),
whether that attempt still runs, and the record of each session on the job's timeline.

Who may hold a grant is the opener's business: the gateway checks keys
(apps.jobs.gateway.access.authorize), the terminal checks the signed-in user's role."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState


@dataclass(frozen=True)
class Grant:
    """What an authenticated connection may reach: one job, as `who` with `fingerprint`
    (the SSH key's; "" for a browser's terminal)."""

    job_pk: int
    job_id: str
    who: str
    fingerprint: str


@dataclass(frozen=True)
class Target:
    """The job's live attempt, as a session needs it; `refusal` says why there is none."""

    attempt_id: int | None
    nonce: str
    refusal: str


def target(grant: Grant) -> Target:
    """The job's live attempt, or why a session cannot be opened now."""
    job = Job.objects.only("state", "reason", "attempt_count").get(pk=grant.job_pk)
    if job.state != JobState.RUNNING:
        why = f" ({job.reason})" if job.reason else ""
        return Target(None, "", f"job {grant.job_id} is {job.state}{why}, not running")
    attempt = (
        Attempt.objects.filter(job_id=grant.job_pk, number=job.attempt_count, ended_at__isnull=True)
        .only("pk", "token_nonce")
        .first()
    )
    if attempt is None:
        return Target(None, "", f"job {grant.job_id} has no running attempt")
    return Target(attempt.pk, attempt.token_nonce, "")


def attempt_live(attempt_id: int) -> str:
    """ "" while the attempt runs; else what ended it, in words for the person connected."""
    attempt = Attempt.objects.select_related("job").only(
        "ended_at", "job__state", "job__reason", "job__public_id"
    )
    found = attempt.filter(pk=attempt_id).first()
    if found is None:
        return "the job is gone"
    if found.ended_at is None and found.job.state == JobState.RUNNING:
        return ""
    job = found.job
    if job.state in (JobState.TERMINATING, JobState.TERMINATED):
        return f"job {job.public_id} was terminated"
    if job.state == JobState.PREEMPTED:
        return f"job {job.public_id} was preempted (it resumes on a new attempt)"
    why = f" ({job.reason})" if job.reason else ""
    return f"job {job.public_id}'s attempt ended: {job.state}{why}"


def _how(grant: Grant, via: str) -> str:
    return f"{via}, key {grant.fingerprint}" if grant.fingerprint else via


def record_opened(grant: Grant, *, sid: str, kind: str, via: str) -> None:
    with transaction.atomic():
        job = Job.objects.get(pk=grant.job_pk)
        services.record_event(
            job=job,
            type=JobEventType.SSH_SESSION_OPENED,
            message=f"{grant.who} opened {kind} ({_how(grant, via)}).",
            data={
                "session": sid,
                "who": grant.who,
                "fingerprint": grant.fingerprint,
                "kind": kind,
                "via": via,
            },
        )


def record_closed(
    grant: Grant, *, sid: str, kind: str, duration_s: float, bytes_in: int, bytes_out: int, why: str
) -> None:
    with transaction.atomic():
        job = Job.objects.get(pk=grant.job_pk)
        services.record_event(
            job=job,
            type=JobEventType.SSH_SESSION_CLOSED,
            message=f"{grant.who}'s {kind} closed after {duration_s:.0f} s: {why}.",
            data={
                "session": sid,
                "who": grant.who,
                "fingerprint": grant.fingerprint,
                "kind": kind,
                "duration_s": round(duration_s, 3),
                "bytes_in": bytes_in,
                "bytes_out": bytes_out,
                "reason": why,
            },
        )


def over_bounds(bytes_carried: int, last_active: float) -> str:
    """Why a session should end now, in words for the person in it ("" when it should not):
    it carried more than SSH_SESSION_MAX_BYTES both ways, or nothing moved since
    `last_active` (time.monotonic()) for SSH_SESSION_IDLE_TIMEOUT_S."""
    if bytes_carried > settings.SSH_SESSION_MAX_BYTES:
        return f"it carried more than {settings.SSH_SESSION_MAX_BYTES} bytes"
    if time.monotonic() - last_active > settings.SSH_SESSION_IDLE_TIMEOUT_S:
        return f"it was idle for {settings.SSH_SESSION_IDLE_TIMEOUT_S:g} s"
    return ""
