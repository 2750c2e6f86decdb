"""`trainyard finetune --secret` against a real server (pytest-django's live server): the
trainer's W&B or MLflow settings reach the job as secret references."""

from __future__ import annotations

import pytest

from apps.accounts import services
from apps.accounts.models import Role
from apps.jobs.models import Job
from apps.secrets import services as secret_services
from trainyard_cli.main import run

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def signed_in(live_server, org, monkeypatch, tmp_path):
    """The CLI's settings from the environment: the live server and a member's key."""
    _, key = services.api_key_create(organization=org, name="cli", role=Role.MEMBER)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("TRAINYARD_URL", live_server.url)
    monkeypatch.setenv("TRAINYARD_API_KEY", key)


def test_finetune_secret_flags_become_the_jobs_secret_env(signed_in, org, project, capsys):
    secret = secret_services.secret_create(
        organization=org, name="wandb", data={"WANDB_API_KEY": "k", "WANDB_PROJECT": "p"}
    )

    code = run(
        [
            "finetune", "--project", "vision", "--model", "/models/tiny",
            "--dataset", "/data/alpaca.jsonl", "--format", "alpaca",
            "--secret", f"WANDB_API_KEY={secret.public_id}:WANDB_API_KEY",
            "--secret", f"WANDB_PROJECT={secret.public_id}:WANDB_PROJECT",
        ]
    )  # fmt: skip

    assert code == 0, capsys.readouterr().err
    job = Job.objects.get()
    assert capsys.readouterr().out == f"{job.public_id}\n"
    assert job.spec["container"]["secret_env"] == {
        "WANDB_API_KEY": {"secret_id": secret.public_id, "key": "WANDB_API_KEY"},
        "WANDB_PROJECT": {"secret_id": secret.public_id, "key": "WANDB_PROJECT"},
    }


def test_a_secret_of_no_such_key_is_refused_naming_it(signed_in, org, project, capsys):
    secret = secret_services.secret_create(organization=org, name="wandb", data={"K": "v"})

    code = run(
        [
            "finetune", "--project", "vision", "--model", "/models/tiny",
            "--dataset", "/data/alpaca.jsonl", "--format", "alpaca",
            "--secret", f"WANDB_API_KEY={secret.public_id}:NOPE",
        ]
    )  # fmt: skip

    assert code != 0
    assert "secret_env.WANDB_API_KEY" in capsys.readouterr().err
    assert not Job.objects.exists()
