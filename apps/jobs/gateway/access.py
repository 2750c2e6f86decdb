"""Who may open sessions into a job, and the record of each one on the job's timeline.

The SSH user is the job's id. A key authenticates when it is the job's own
`access.ssh_public_key`, or a key that a member (not a viewer) of the job's organization
registered for that organization. Anything else, another organization's job or a job that
does not exist included, is the same refusal: the gateway tells nobody which jobs exist."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from django.db import close_old_connections, connection, transaction

from apps.accounts import ssh_keys
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import Attempt, Job
from apps.jobs.shell.hostkey import fingerprint_of
from apps.jobs.states import JobState

JOB_KEY = "the job's access key"


def _fresh_connection(function: Callable) -> Callable:
    """The gateway lives for days: before each use, drop a database connection that broke or
    aged out (what Django does between requests)."""

    @wraps(function)
    def wrapped(*args, **kwargs):
        if not connection.in_atomic_block:  # a caller's transaction keeps its connection
            close_old_connections()
        return function(*args, **kwargs)

    return wrapped


@dataclass(frozen=True)
class Grant:
    """What an authenticated connection may reach: one job, as `who` with `fingerprint`."""

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


def _blob(public_line: str) -> bytes | None:
    parts = public_line.split()
    if len(parts) < 2:
        return None
    try:
        return base64.b64decode(parts[1], validate=True)
    except ValueError:
        return None


@_fresh_connection
def authorize(username: str, public_line: str) -> Grant | None:
    """The grant for `public_line` on the job named `username`, or None."""
    if len(username) > 32:
        return None
    job = Job.objects.filter(public_id=username).only("pk", "public_id", "organization_id", "spec")
    job = job.first()
    blob = _blob(public_line)
    if job is None or blob is None:
        return None
    fingerprint = fingerprint_of(public_line)
    job_key = ((job.spec or {}).get("access") or {}).get("ssh_public_key") or ""
    if _blob(job_key) == blob:
        return Grant(job.pk, job.public_id, JOB_KEY, fingerprint)
    key = ssh_keys.member_key(job.organization_id, public_line)
    if key is None:
        return None
    ssh_keys.touch(key)
    return Grant(job.pk, job.public_id, key.user.email or key.user.get_username(), fingerprint)


@_fresh_connection
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


@_fresh_connection
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


@_fresh_connection
def record_opened(grant: Grant, *, sid: str, kind: str, via: str) -> None:
    with transaction.atomic():
        job = Job.objects.get(pk=grant.job_pk)
        services.record_event(
            job=job,
            type=JobEventType.SSH_SESSION_OPENED,
            message=f"{grant.who} opened {kind} ({via}, key {grant.fingerprint}).",
            data={
                "session": sid,
                "who": grant.who,
                "fingerprint": grant.fingerprint,
                "kind": kind,
                "via": via,
            },
        )


@_fresh_connection
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
