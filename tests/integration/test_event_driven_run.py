"""Placement and stopping driven by events, not by the reconcile tick: with Celery beat
stopped (no reconcile pass at all), a waiting job takes a slot the moment it frees, and
Terminate stops a workload whose runner can no longer hear any order."""

from __future__ import annotations

import itertools
import os
import signal
import uuid

import pytest

from apps.jobs.models import Attempt
from runner import procfs
from tests.integration.conftest import TERMINAL, UNTIL_LET_GO, let_go
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def no_reconcile(stack):
    """Beat stopped for the test: nothing runs on a tick."""
    stack.procs["beat"].stop(signal.SIGTERM)
    try:
        yield
    finally:
        stack.start_beat()


def _submit(api, accelerator: str, command: list[str], name: str) -> str:
    response = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json={
            "name": name,
            "compute": {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": command},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_a_waiting_job_takes_the_slot_the_moment_it_frees(api, stack, solo, no_reconcile):
    first = _submit(api, solo, ["bash", "-c", UNTIL_LET_GO], "first")
    api.wait_state(first, "running", timeout=30)
    queue = [_submit(api, solo, ["true"], f"next-{n}") for n in range(3)]
    for job_id in queue:
        assert api.job(job_id)["state"] == "requested"  # the only slot is taken
    let_go(stack, first)
    for job_id in [first, *queue]:  # each end frees the slot for the next, with no tick
        assert api.wait_state(job_id, TERMINAL, timeout=30)["state"] == "succeeded"
    attempts = sorted(
        (Attempt.objects.get(job__public_id=job_id) for job_id in [first, *queue]),
        key=lambda attempt: attempt.allocated_at,
    )
    for earlier, later in itertools.pairwise(attempts):
        assert earlier.ended_at <= later.allocated_at  # one at a time on the one slot


def test_terminate_stops_a_workload_whose_runner_hears_no_order(api, no_reconcile):
    job_id = _submit(api, "cpu", ["sleep", "600"], "deaf")
    api.wait_state(job_id, "running", timeout=30)
    attempt = Attempt.objects.get(job__public_id=job_id)
    # The runner is frozen: no heartbeat, so no heartbeat answer can carry the order.
    os.kill(attempt.handle["pid"], signal.SIGSTOP)
    assert api.terminate(job_id)["state"] == "terminating"
    done = api.wait_state(job_id, TERMINAL, timeout=30)
    assert (done["state"], done["reason"]) == ("terminated", "cancelled")
    wait_for(
        lambda: not procfs.group_members(attempt.handle["pgid"]), 10, "the process group to go"
    )
