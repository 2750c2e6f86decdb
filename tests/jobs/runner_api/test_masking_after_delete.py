"""A deleted secret never switches masking off: the values a job's runner was handed stay
masked in its lines, and the other secrets' values too (runner endpoints, real DB)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, LogLine
from apps.jobs.states import JobState
from apps.jobs.telemetry import masking
from apps.secrets import services as secret_services
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

HUB, WANDB = "hub-value-0001", "wandb-value-0002"


@pytest.fixture(autouse=True)
def fresh_maskers():
    """Every masker is built from the database, as in a worker that never saw the job."""
    masking.maskers.clear()
    yield
    masking.maskers.clear()


@pytest.fixture
def two_secrets(org):
    hub = secret_services.secret_create(organization=org, name="hub", data={"T": HUB})
    wandb = secret_services.secret_create(organization=org, name="wandb", data={"K": WANDB})
    return hub, wandb


def _runner(org, hub, wandb):
    job = make_job(
        org,
        container={
            "image": "img",
            "command": ["true"],
            "secret_env": {
                "HF_TOKEN": {"secret_id": hub.public_id, "key": "T"},
                "WANDB_API_KEY": {"secret_id": wandb.public_id, "key": "K"},
            },
        },
    )
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    return Job.objects.get(pk=job.pk), attempt, client


def _send(client, job, seq, message):
    line = {"seq": seq, "ts": datetime.now(UTC).isoformat(), "message": message}
    response = client.post(
        f"/api/v1/runner/jobs/{job.public_id}/logs", {"lines": [line]}, "application/json"
    )
    assert response.status_code == 200, response.content
    return LogLine.objects.get(job=job, seq=seq).message


def test_values_handed_out_stay_masked_after_their_secret_is_deleted(org, two_secrets):
    hub, wandb = two_secrets
    job, _, client = _runner(org, hub, wandb)
    spec = client.get(f"/api/v1/runner/jobs/{job.public_id}/spec").json()
    assert sorted(spec["mask"]) == sorted([HUB, WANDB])
    secret_services.secret_delete(secret=hub)
    assert _send(client, job, 1, f"hub={HUB} wandb={WANDB}") == "hub=*** wandb=***"


def test_a_value_masked_once_stays_masked_for_later_batches(org, two_secrets):
    hub, wandb = two_secrets
    job, _, client = _runner(org, hub, wandb)
    client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")
    assert _send(client, job, 1, f"{HUB} {WANDB}") == "*** ***"
    secret_services.secret_delete(secret=hub)
    secret_services.secret_delete(secret=wandb)
    masking.maskers.clear()  # the cached masker has expired
    assert _send(client, job, 2, f"{HUB} {WANDB}") == "*** ***"


def test_without_a_served_spec_the_secrets_still_there_are_masked(org, two_secrets):
    hub, wandb = two_secrets
    job, _, client = _runner(org, hub, wandb)
    secret_services.secret_delete(secret=hub)
    assert _send(client, job, 1, f"wandb={WANDB}") == "wandb=***"


def test_the_remembered_values_are_stored_encrypted(org, two_secrets):
    hub, wandb = two_secrets
    job, attempt, client = _runner(org, hub, wandb)
    client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")
    client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")  # a relaunch adds nothing twice
    stored = Attempt.objects.get(pk=attempt.pk).mask_values_encrypted
    assert stored and HUB not in stored and WANDB not in stored
    assert masking.unseal(stored) == [HUB, WANDB]
