"""Who the gateway lets into a job, what it says when a session cannot be opened, and the
bounds that end a session (apps.jobs.gateway)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.gateway import access
from apps.jobs.gateway.sessions import Carried
from apps.jobs.states import JobState
from tests import sshkeys
from tests.factories import MembershipFactory, OrganizationFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


def _job_with_key(org, public: str):
    return make_job(org, access={"ssh_public_key": public})


def test_the_jobs_own_key_and_a_members_registered_key_get_a_grant(org):
    own = sshkeys.ed25519_line("me@laptop")
    job = _job_with_key(org, own)
    grant = access.authorize(job.public_id, own)
    assert grant is not None and grant.who == access.JOB_KEY and grant.job_id == job.public_id
    assert grant.fingerprint.startswith("SHA256:")

    member = MembershipFactory(organization=org, role=Role.MEMBER).user
    registered = sshkeys.ed25519_line()
    account_services.ssh_key_add(organization=org, user=member, public_key=registered)
    assert access.authorize(job.public_id, registered).who == member.email


def test_a_viewer_another_organizations_member_and_an_unknown_job_get_nothing(org):
    job = _job_with_key(org, sshkeys.ed25519_line())
    viewer = MembershipFactory(organization=org, role=Role.VIEWER).user
    viewers_key = sshkeys.ed25519_line()
    account_services.ssh_key_add(organization=org, user=viewer, public_key=viewers_key)
    elsewhere = OrganizationFactory()
    outsider = MembershipFactory(organization=elsewhere, role=Role.OWNER).user
    outsiders_key = sshkeys.ed25519_line()
    account_services.ssh_key_add(organization=elsewhere, user=outsider, public_key=outsiders_key)

    assert access.authorize(job.public_id, viewers_key) is None
    assert access.authorize(job.public_id, outsiders_key) is None
    assert access.authorize("job_nosuchjob", viewers_key) is None
    assert access.authorize(job.public_id, "not a key") is None
    assert access.authorize("x" * 200, viewers_key) is None


def test_a_job_that_is_not_running_says_so_and_ends_sessions_with_a_reason(org):
    own = sshkeys.ed25519_line()
    job = _job_with_key(org, own)
    grant = access.authorize(job.public_id, own)
    waiting = access.target(grant)
    assert waiting.attempt_id is None
    assert waiting.refusal == f"job {job.public_id} is requested, not running"

    attempt = dispatch.allocate(job.pk)
    for state in (JobState.PROVISIONING, JobState.RUNNING):
        services.job_transition(job_id=job.pk, to=state)
    live = access.target(grant)
    assert (live.attempt_id, live.refusal) == (attempt.pk, "")
    assert access.attempt_live(attempt.pk) == ""
    services.job_terminate(job=job)
    assert access.attempt_live(attempt.pk) == f"job {job.public_id} was terminated"


def _carried() -> Carried:
    return Carried(SimpleNamespace(grant=None, attempt_id=None, carried=set()))


def test_a_session_over_its_bytes_or_idle_too_long_is_to_be_ended(settings):
    settings.SSH_SESSION_MAX_BYTES = 1000
    settings.SSH_SESSION_IDLE_TIMEOUT_S = 60
    busy = _carried()
    busy.queue_down(b"d", b"x" * 600)
    assert busy.over_bounds() == ""
    busy.bytes_out += 401
    assert busy.over_bounds() == "it carried more than 1000 bytes"

    idle = _carried()
    idle.last_active = time.monotonic() - 61
    assert idle.over_bounds() == "it was idle for 60 s"
