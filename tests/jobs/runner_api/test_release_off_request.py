"""An attempt ended inside a runner's own request (a spec that can never be served, say) is
released by a worker, never in that request: a provider's release can take as long as
`podman rm --force`, and the runner is waiting for its answer meanwhile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import Client

from apps.jobs import enqueue, services, tasks
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt
from apps.jobs.states import JobState
from apps.secrets import services as secret_services
from runner import procfs
from runner.hostctl import TOKEN_FILE
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


def _queued_releases(attempt_id: int) -> list[str]:
    """The release tasks for `attempt_id` waiting in the broker's default queue (taken out)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    found = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        if headers["task"] == enqueue.RELEASE_ATTEMPT and headers["argsrepr"] == f"[{attempt_id}]":
            found.append(headers["task"])
            client.lrem("celery", 0, raw)
    return found


@pytest.fixture
def workload(tmp_path: Path):
    """A process group standing for the attempt's runner on the host runtime, and the token
    file a runner that never ran leaves behind: what the local provider's release removes."""
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / TOKEN_FILE).write_text("tyr_x_y")
    handle = {
        "pid": group.pid,
        "pgid": group.pid,
        "start_ticks": procfs.stat(group.pid).start_ticks,
        "workdir": str(tmp_path),
    }
    yield group, handle, tmp_path / TOKEN_FILE
    group.kill()
    group.wait()


def test_a_spec_that_fails_the_job_answers_before_the_attempt_is_released(
    org, workload, django_capture_on_commit_callbacks
):
    group, handle, token_file = workload
    hub = secret_services.secret_create(organization=org, name="hub", data={"HF": "v"})
    job = make_job(
        org,
        container={
            "image": "img",
            "command": ["true"],
            "secret_env": {"HF_TOKEN": {"secret_id": hub.public_id, "key": "HF"}},
        },
    )
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    Attempt.objects.filter(pk=attempt.pk).update(handle=handle)
    assert attempt.provider.kind == "local"
    secret_services.secret_delete(secret=hub)
    _queued_releases(attempt.pk)  # none left over from anything before
    runner = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")

    with django_capture_on_commit_callbacks(execute=True):
        answer = runner.get(f"/api/v1/runner/jobs/{job.public_id}/spec")

    assert answer.status_code == 409
    assert Attempt.objects.get(pk=attempt.pk).end_reason == "secret_missing"
    # Nothing of the provider was touched in the request: the release waits for a worker.
    assert group.poll() is None
    assert token_file.exists()
    assert _queued_releases(attempt.pk) == [enqueue.RELEASE_ATTEMPT]

    tasks.release_attempt(attempt.pk)  # what the worker runs

    assert group.wait(timeout=10) == -9
    assert not token_file.exists()
    tasks.release_attempt(attempt.pk)  # again (a redelivery): nothing left to do, no error
