"""A job runs for real on the SSH provider: API → Celery dispatch → the SSH backend → a
detached runner started through a real sshd on loopback → workload → ingestion → final state,
on the real web server, worker and beat."""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

from apps.jobs.models import Attempt
from tests.integration.conftest import TERMINAL
from tests.integration.test_hub_run import (
    finetune_from_the_hub,
    hub_model_and_data,
    published_repo,
)
from tests.live import ROOT

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_job_on_the_ssh_provider_succeeds_with_its_logs(ssh_provider, api):
    job = api.submit(command=["bash", "-c", "echo hello from $(hostname); echo oops >&2"])
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["exit_code"], done["reason"]) == ("succeeded", 0, None)
    lines = {line["message"]: line["stream"] for line in api.logs(job["id"], source="user")}
    assert lines == {f"hello from {socket.gethostname()}": "stdout", "oops": "stderr"}
    system = [line["message"] for line in api.logs(job["id"], source="system")]
    assert any(message.startswith("allocated ssh-loopback: cpu x1") for message in system)
    attempt = Attempt.objects.get(job__public_id=job["id"])
    assert attempt.provider_id == ssh_provider.pk
    assert attempt.handle["host"] == f"{ssh_provider.config['user']}@127.0.0.1:" + str(
        ssh_provider.config["port"]
    )
    assert "token" not in str(attempt.handle).lower()


def test_a_runner_killed_on_the_far_host_is_lost_and_the_job_placed_again(ssh_provider, api):
    again = 'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then sleep 600; fi; echo "attempt $TRAINYARD_ATTEMPT"'
    job = api.submit(command=["bash", "-c", again])
    api.wait_state(job["id"], "running", timeout=60)
    first = Attempt.objects.get(job__public_id=job["id"], number=1)
    os.killpg(first.handle["pgid"], signal.SIGKILL)  # the far host's runner, without a word

    done = api.wait_state(job["id"], TERMINAL, timeout=120)
    assert done["state"] == "succeeded"
    assert [a["end_reason"] for a in done["attempts"]] == ["reclaimed", "exit_code_0"]
    assert done["preemption_count"] == 1
    assert [line["message"] for line in api.logs(job["id"], source="user")] == ["attempt 2"]
    second = Attempt.objects.get(job__public_id=job["id"], number=2)
    assert second.provider_id == ssh_provider.pk


def test_a_finetune_of_a_model_and_data_from_the_hub_succeeds_on_the_ssh_provider(
    ssh_provider, api, compute_org, live_stack, tiny_model, demo_data
):
    """No host path anywhere: the far host's trainer fetches both from the control plane's
    hub with its attempt's token, and the adapter comes back to the hub."""
    # The trainer runs on the far host from this checkout, with this virtualenv's interpreter.
    ssh_provider.config = {**ssh_provider.config, "python": sys.executable, "pythonpath": str(ROOT)}
    ssh_provider.save()
    model, data = hub_model_and_data(live_stack, compute_org, tiny_model, demo_data)

    done = finetune_from_the_hub(api, compute_org, model, data)

    attempt = Attempt.objects.get(job__public_id=done["id"])
    assert attempt.provider_id == ssh_provider.pk
    logs = [line["message"] for line in api.logs(done["id"])]
    assert f"trainer: model {model} comes from this organization's hub" in logs
    assert published_repo(api, done["id"]) == f"{compute_org.slug}/hub-tune"
