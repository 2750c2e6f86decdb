"""A job runs for real on the SSH provider: API → Celery dispatch → the SSH backend → a
detached runner started through a real sshd on loopback → workload → ingestion → final state,
on the real web server, worker and beat."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from apps.jobs.models import Attempt
from tests.integration.conftest import TERMINAL

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
