"""A job run for real on the slurm provider: API → Celery dispatch → sbatch → the runner in a
batch job of a real single-node cluster → ingestion → `succeeded`."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from apps.billing.models import Transfer
from apps.jobs.live.partials import state_context
from apps.jobs.models import Attempt
from apps.providers.models import Provider
from tests.factories import ProjectFactory
from tests.integration.conftest import TERMINAL
from tests.integration.held_trainer import hold_at_checkpoint, release_when_signalled
from tests.integration.stack import wait_for
from tests.integration.test_hub_run import hub_model_and_data, published_repo
from tests.integration.test_preemption_run import (
    assert_reclaimed_then_resumed_to_the_end,
    submit_finetune,
)
from tests.live import ROOT

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_an_api_job_runs_on_the_slurm_provider_to_succeeded(slurm_provider, slurm_cluster, api):
    job = api.submit(command=["bash", "-c", 'echo "hello from Slurm job $SLURM_JOB_ID"'])
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["exit_code"], done["reason"]) == ("succeeded", 0, None)
    attempt = Attempt.objects.get(job__public_id=job["id"])
    assert attempt.provider == slurm_provider
    slurm_id = attempt.handle["job_id"]
    assert attempt.handle["name"] == f"ty-{job['id']}-1"
    assert [line["message"] for line in api.logs(job["id"], source="user")] == [
        f"hello from Slurm job {slurm_id}"
    ]
    system = [line["message"] for line in api.logs(job["id"], source="system")]
    assert any(message.startswith("allocated slurm: cpu x1") for message in system)
    assert slurm_cluster.job_state(slurm_id) in {None, "COMPLETED"}


# The trainer is held still while Slurm preempts it (tests/integration/held_trainer.py), so a
# short run is certain to be found mid-training.
STEPS = 24


def _queue_reason(api, job_id: str) -> str:
    job = api.job(job_id)
    attempts = job["attempts"]
    return attempts[-1]["queue_reason"] if job["state"] == "provisioning" and attempts else ""


def test_a_job_queued_behind_a_full_partition_is_provisioning_with_slurms_reason_unbilled(
    slurm_provider, slurm_cluster, api
):
    blocker = slurm_cluster.sbatch("--partition=low", "--cpus-per-task=2", "--wrap", "sleep 300")
    wait_for(lambda: slurm_cluster.job_state(blocker) == "RUNNING", 30, what="the blocker")
    job = api.submit(command=["bash", "-c", "echo ran after the queue"])

    reason = wait_for(
        lambda: (
            _queue_reason(api, job["id"]) in {"Resources", "Priority"}
            and _queue_reason(api, job["id"])
        ),
        60,
        what="Slurm's queue reason",
    )
    queued = [e for e in api.events(job["id"]) if e["type"] == "provider_queued"]
    reasons = [e["data"]["reason"] for e in queued]
    assert reasons[-1] == reason and len(reasons) == len(set(reasons))  # each said once
    assert f"Queued at slurm: {reason}" in queued[-1]["message"]
    attempt = Attempt.objects.select_related("provider").get(job__public_id=job["id"])
    page = render_to_string("jobs/partials/status.html", state_context(attempt.job))
    assert f"queued at slurm: {reason}" in page
    # Five seconds later (five reconcile passes; the stack's clock runs 60 times fast, so
    # five billed minutes if the queue were billed) it still waits, unbilled and not lost.
    since = datetime.fromisoformat(queued[0]["created_at"])
    wait_for(lambda: timezone.now() - since > timedelta(seconds=5), 10, what="five passes")
    waiting = api.job(job["id"])
    assert (waiting["state"], waiting["accrued_usd"]) == ("provisioning", 0)
    assert waiting["attempts"][0]["billed_minutes"] == 0
    assert waiting["attempts"][0]["billing_started_at"] is None
    assert not Transfer.objects.filter(job__public_id=job["id"], code="usage").exists()

    slurm_cluster.run("scancel", blocker)
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    [ran] = done["attempts"]
    assert ran["queue_reason"] == ""
    attempt.refresh_from_db()
    assert attempt.billing_started_at - attempt.allocated_at > timedelta(seconds=5)
    # Billed from when Slurm started it, not from the queue (accounted time is wall x 60).
    ran_seconds = (attempt.ended_at - attempt.billing_started_at).total_seconds()
    assert ran["billed_minutes"] == max(1, int(ran_seconds * 60 // 60))
    assert [line["message"] for line in api.logs(job["id"], source="user")] == [
        "ran after the queue"
    ]


def _story(api, job_id: str, slurm_cluster, *slurm_ids: str) -> str:
    """What the job went through and what Slurm says of its batch jobs: for a failure."""
    lines = [
        f"{e['created_at']} {e['type']} {e['message']} {e['data']}" for e in api.events(job_id)
    ]
    attempts = Attempt.objects.filter(job__public_id=job_id).order_by("number")
    for attempt in attempts:
        slurm_id = (attempt.handle or {}).get("job_id")
        lines.append(f"attempt {attempt.number}: slurm {slurm_id} {attempt.end_reason!r}")
        slurm_ids = (*slurm_ids, str(slurm_id)) if slurm_id else slurm_ids
    for slurm_id in slurm_ids:
        lines.append(slurm_cluster.run("scontrol", "show", "job", slurm_id, check=False).stdout)
    return "\n".join(lines)


def test_a_preemptible_finetune_preempted_by_a_high_partition_job_resumes_from_its_checkpoint(
    slurm_provider, slurm_cluster, api, compute_org, live_stack, tiny_model, demo_data
):
    """Model and data from the organization's hub (no host path anywhere): the node's
    trainer fetches them with each attempt's token, and the adapter goes back to the hub."""
    # The trainer runs on the node from this checkout, with this virtualenv's interpreter.
    provider = Provider.objects.get(pk=slurm_provider.pk)
    provider.config = {**provider.config, "python": sys.executable, "pythonpath": str(ROOT)}
    provider.save()
    project = ProjectFactory(organization=compute_org)
    from_hub = hub_model_and_data(live_stack, compute_org, tiny_model, demo_data)
    finetune = submit_finetune(
        api,
        project,
        "cpu",
        tiny_model,
        demo_data,
        priority="preemptible",
        max_steps=STEPS,
        from_hub=from_hub,
    )
    held = hold_at_checkpoint(finetune, 4)

    # A job in the higher-tier partition takes the node: Slurm preempts the attempt (at its
    # next scheduling pass: SIGTERM, then SIGKILL after the partition's grace time).
    high = slurm_cluster.sbatch("--partition=high", "--cpus-per-task=2", "--wrap", "sleep 15")
    release_when_signalled(held)
    try:
        wait_for(
            lambda: any(
                e["type"] == "state_changed" and e["data"].get("to") == "preempted"
                for e in api.events(finetune)
            ),
            timeout=120,  # Slurm's next scheduling pass, then the runner's stop, on a busy host
            what="the attempt to be reclaimed",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{_story(api, finetune, slurm_cluster, high)}") from exc
    # The next attempt waits in Slurm's queue behind the high job, then resumes.
    assert wait_for(lambda: _queue_reason(api, finetune), 60, what="attempt 2 queued")
    assert slurm_cluster.job_state(high) == "RUNNING"

    assert_reclaimed_then_resumed_to_the_end(api, finetune, STEPS)  # steps never go back
    assert published_repo(api, finetune) == f"{compute_org.slug}/tiny-lora"


def test_an_attempt_queued_past_the_queue_timeout_is_given_up_and_the_job_placed_again(
    slurm_provider, slurm_cluster, api
):
    provider = Provider.objects.get(pk=slurm_provider.pk)
    provider.config = {**provider.config, "queue_timeout_s": 3}
    provider.save()
    blocker = slurm_cluster.sbatch("--partition=low", "--cpus-per-task=2", "--wrap", "sleep 300")
    wait_for(lambda: slurm_cluster.job_state(blocker) == "RUNNING", 30, what="the blocker")
    job = api.submit(command=["bash", "-c", 'echo "ran as attempt $TRAINYARD_ATTEMPT"'])

    wait_for(
        lambda: any(e["type"] == "queue_timeout" for e in api.events(job["id"])),
        30,
        what="the queue timeout",
    )
    provider.config = {**provider.config, "queue_timeout_s": 3600}  # the next one may wait
    provider.save()
    first = Attempt.objects.get(job__public_id=job["id"], number=1)
    assert first.end_reason == "queue_timeout" and first.billed_minutes == 0
    # Its place in Slurm's queue is given up: the batch job is cancelled.
    wait_for(
        lambda: slurm_cluster.job_state(first.handle["job_id"]) in {None, "CANCELLED"},
        30,
        what="the first batch job to be cancelled",
    )

    slurm_cluster.run("scancel", blocker)
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    assert done["attempts"][0]["end_reason"] == "queue_timeout"
    assert done["attempts"][-1]["end_reason"] == "exit_code_0"
    user = [line["message"] for line in api.logs(job["id"], source="user")]
    assert user == [f"ran as attempt {len(done['attempts'])}"]
