"""A fine-tune takes `secret_env` like a container job (the trainer's W&B and MLflow keys come
that way): through the API and the New Job page's fine-tune form, references only, checked
against the organization's secrets, resolved only in the runner's spec."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.finetunes.payloads import CONFIG_ENV
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job
from apps.secrets import services as secret_services
from tests.jobs.web.test_new_job_page import PAGE, field_errors, finetune_data

pytestmark = pytest.mark.django_db

CONFIG = {"model": "/models/tiny", "dataset": "/data/alpaca.jsonl", "dataset_format": "alpaca"}
KEY_VALUE = "wandb-key-0123456789abcdef"


@pytest.fixture
def wandb_secret(org):
    return secret_services.secret_create(
        organization=org, name="wandb", data={"WANDB_API_KEY": KEY_VALUE}
    )


def _post(api, project, body):
    return api.post(
        f"/api/v1/projects/{project.public_id}/finetunes",
        body,
        format="json",
        HTTP_IDEMPOTENCY_KEY="ft-secret",
    )


def test_the_api_keeps_the_reference_and_the_runner_gets_the_value(
    api_client_for, org, project, wandb_secret
):
    ref = {"secret_id": wandb_secret.public_id, "key": "WANDB_API_KEY"}
    body = {"name": "ft", **CONFIG, "secret_env": {"WANDB_API_KEY": ref}}
    response = _post(api_client_for(org), project, body)
    assert response.status_code == 201, response.json()
    job = Job.objects.get(public_id=response.json()["id"])
    assert job.spec["container"]["secret_env"] == {"WANDB_API_KEY": ref}
    assert KEY_VALUE not in str(job.spec)

    attempt = dispatch.allocate(job.pk)
    runner = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    spec = runner.get(f"/api/v1/runner/jobs/{job.public_id}/spec").json()
    assert spec["env"]["WANDB_API_KEY"] == KEY_VALUE
    assert KEY_VALUE in spec["mask"]  # never shown in the job's logs


@pytest.mark.parametrize(
    ("secret_env", "param"),
    [
        ({CONFIG_ENV: "own"}, f"secret_env.{CONFIG_ENV}"),
        ({"TRAINYARD_TOKEN": "own"}, "secret_env.TRAINYARD_TOKEN"),
        ({"WANDB_API_KEY": "theirs"}, "secret_env.WANDB_API_KEY"),
        ({"WANDB_API_KEY": "missing-key"}, "secret_env.WANDB_API_KEY"),
    ],
    ids=["config-variable", "platform-prefix", "another-orgs-secret", "missing-key"],
)
def test_a_bad_secret_reference_is_a_400_naming_it(
    api_client_for, org, other_org, project, wandb_secret, secret_env, param
):
    theirs = secret_services.secret_create(organization=other_org, name="w", data={"K": "v"})
    refs = {
        "own": {"secret_id": wandb_secret.public_id, "key": "WANDB_API_KEY"},
        "theirs": {"secret_id": theirs.public_id, "key": "K"},
        "missing-key": {"secret_id": wandb_secret.public_id, "key": "NOPE"},
    }
    body = {"name": "ft", **CONFIG, "secret_env": {k: refs[v] for k, v in secret_env.items()}}
    response = _post(api_client_for(org), project, body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == param
    assert not Job.objects.exists()


def test_the_finetune_form_takes_secrets_by_name(client_for, member, project, wandb_secret):
    response = client_for(member).post(
        PAGE, finetune_data(secrets="WANDB_API_KEY=wandb:WANDB_API_KEY")
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.spec["container"]["secret_env"] == {
        "WANDB_API_KEY": {"secret_id": wandb_secret.public_id, "key": "WANDB_API_KEY"}
    }


def test_the_finetune_form_names_a_secret_that_is_not_there(client_for, member, project):
    response = client_for(member).post(PAGE, finetune_data(secrets="WANDB_API_KEY=nope:K"))
    assert response.status_code == 200
    assert field_errors(response, "finetune-secrets") == [
        "WANDB_API_KEY: no secret nope (by id or name) in this organization."
    ]
    assert not Job.objects.exists()
