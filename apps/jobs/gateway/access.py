"""Who may open sessions into a job, and the record of each one on the job's timeline.

The SSH user is the job's id. A key authenticates when it is the job's own
`access.ssh_public_key`, or a key that a member (not a viewer) of the job's organization
registered for that organization. Anything else, another organization's job or a job that
does not exist included, is the same refusal: the gateway tells nobody which jobs exist.
The grant, the job's live attempt and the record of sessions are shared with the job page's
terminal (apps.jobs.shell.access); here each use of the database starts from a live
connection."""

from __future__ import annotations

import base64
from collections.abc import Callable
from functools import wraps

from django.db import close_old_connections, connection

from apps.accounts import ssh_keys
from apps.jobs.models import Job
from apps.jobs.shell import access as shared
from apps.jobs.shell.access import Grant, Target  # noqa: F401  (the gateway's names for them)
from apps.jobs.shell.hostkey import fingerprint_of

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


target = _fresh_connection(shared.target)
attempt_live = _fresh_connection(shared.attempt_live)
record_opened = _fresh_connection(shared.record_opened)
record_closed = _fresh_connection(shared.record_closed)
