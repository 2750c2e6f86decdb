"""Issue 38, point 15: a secret that no key of SECRETS_KEYS opens any more (its key dropped
before `rotate_secrets` ran) fails the job at once, `secret_undecryptable`, naming the
variable, the secret and its key, never a value; the runner's `GET spec` gets a clean 409
(it exits 0) instead of a 500 at every retry until the attempt was declared lost and the job
placed and billed again. `rotate_secrets` lists such secrets instead of crashing. Encrypted
with one key, read with another; the runner is played with the Django test client and a real
token against the real database."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from apps.billing import holds
from apps.core.crypto import decrypt_data
from apps.jobs import services, tasks
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, JobEvent, LogLine
from apps.jobs.reasons import reason_text
from apps.jobs.states import JobState
from apps.secrets import services as secret_services
from apps.secrets.models import Secret
from runner.client import Outcome, classify
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

OLD = Fernet.generate_key().decode()
NEW = Fernet.generate_key().decode()
VALUE = "hf_0ld-key-S3cret-value"
OTHER_VALUE = "wandb-n3w-key-value"


def _job_with_a_lost_secret(org):
    """A provisioning job whose HF_TOKEN comes from a secret encrypted with OLD only, and
    whose WANDB_API_KEY from one encrypted with NEW; SECRETS_KEYS holds NEW alone after."""
    with override_settings(SECRETS_KEYS=[OLD]):
        hub = secret_services.secret_create(organization=org, name="hub", data={"HF": VALUE})
    with override_settings(SECRETS_KEYS=[NEW]):
        wandb = secret_services.secret_create(
            organization=org, name="wandb", data={"KEY": OTHER_VALUE}
        )
        job = make_job(
            org,
            container={
                "image": "img",
                "command": ["python", "train.py"],
                "secret_env": {
                    "HF_TOKEN": {"secret_id": hub.public_id, "key": "HF"},
                    "WANDB_API_KEY": {"secret_id": wandb.public_id, "key": "KEY"},
                },
            },
        )
        attempt = dispatch.allocate(job.pk)
    assert attempt is not None
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    return job, attempt, client, hub


def _spec(client, job):
    return client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")


@override_settings(SECRETS_KEYS=[NEW])
def test_a_secret_no_key_opens_fails_the_job_at_once_naming_secret_and_key(org):
    job, attempt, client, hub = _job_with_a_lost_secret(org)
    assert holds.held_for_job(job.pk) > 0

    answer = _spec(client, job)

    assert answer.status_code == 409
    assert answer.json()["error"]["type"] == "attempt_superseded"
    assert classify(answer.status_code, answer.json()) is Outcome.SUPERSEDED  # runner exits 0
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "secret_undecryptable")
    assert "'hub'" in job.error_message and hub.public_id in job.error_message
    assert "'HF'" in job.error_message and "HF_TOKEN" in job.error_message
    failed = JobEvent.objects.filter(job=job, type="state_changed").last()
    assert (failed.data["to"], failed.data["reason"]) == ("failed", "secret_undecryptable")
    assert {k: failed.data[k] for k in ("env", "secret_id", "secret_name", "key")} == {
        "env": "HF_TOKEN",
        "secret_id": hub.public_id,
        "secret_name": "hub",
        "key": "HF",
    }
    system = list(
        LogLine.objects.filter(job=job, source="system").values_list("message", flat=True)
    )
    assert any("'hub'" in line and "SECRETS_KEYS" in line for line in system)
    ended = Attempt.objects.get(pk=attempt.pk)
    assert ended.ended_at is not None and ended.end_reason == "secret_undecryptable"
    assert holds.held_for_job(job.pk) == 0  # the hold is let go as for any failure
    assert "decrypted" in reason_text("secret_undecryptable")
    said = (
        repr(list(JobEvent.objects.filter(job=job).values_list("message", "data")))
        + repr(list(LogLine.objects.filter(job=job).values_list("message", flat=True)))
        + repr(Job.objects.get(pk=job.pk).__dict__)
    )
    assert VALUE not in said and OTHER_VALUE not in said

    # No second attempt: reconcile and the runner's retries place nothing and change nothing.
    tasks.reconcile()
    assert dispatch.allocate(job.pk) is None
    assert _spec(client, job).status_code == 409
    job.refresh_from_db()
    assert (job.state, job.attempt_count, job.preemption_count) == (JobState.FAILED, 1, 0)
    assert Attempt.objects.filter(job=job).count() == 1
    assert JobEvent.objects.filter(job=job, data__reason="secret_undecryptable").count() == 1


def test_with_the_old_key_back_the_same_secret_serves_the_spec(org):
    job, _, client, _ = _job_with_a_lost_secret(org)
    with override_settings(SECRETS_KEYS=[NEW, OLD]):
        answer = _spec(client, job)
    assert answer.status_code == 200
    assert answer.json()["env"]["HF_TOKEN"] == VALUE


def test_rotate_secrets_lists_the_secrets_no_key_opens_and_rotates_the_rest(org, other_org, capsys):
    with override_settings(SECRETS_KEYS=[OLD]):
        secret_services.secret_create(organization=org, name="lost", data={"A": VALUE})
    mid = Fernet.generate_key().decode()
    with override_settings(SECRETS_KEYS=[mid]):
        secret_services.secret_create(organization=other_org, name="kept", data={"B": "b"})

    with override_settings(SECRETS_KEYS=[NEW, mid]), pytest.raises(CommandError) as refused:
        call_command("rotate_secrets")

    out, err = capsys.readouterr()
    assert out == (
        "Re-encrypted 1 secrets with the newest key.\n"
        "Re-encrypted the credentials of 0 providers.\n"
    )
    lost = Secret.objects.get(name="lost")
    assert f"secret 'lost' ({lost.public_id}) of organization '{org.slug}'" in err
    assert "kept" not in err and VALUE not in err
    assert "1 could not be decrypted" in str(refused.value)
    with override_settings(SECRETS_KEYS=[NEW]):
        assert decrypt_data(Secret.objects.get(name="kept").ciphertext) == {"B": "b"}
    with override_settings(SECRETS_KEYS=[OLD]):  # left as it was
        assert decrypt_data(lost.ciphertext) == {"A": VALUE}
