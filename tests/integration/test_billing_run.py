"""Money on the real stack (web, worker, beat as processes; one wall second is one billed
minute): a terminate budget ends a job within a reconcile pass, and a worker and beat
killed mid-run neither skip a billed minute nor post one twice."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from apps.billing import ledger
from apps.billing.models import Budget, Transfer
from apps.catalog.models import Accelerator, Offer
from apps.jobs.models import Attempt, Job
from apps.providers.models import Provider
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _accelerator(price_micros: int) -> str:
    """An accelerator of the test's own with one local slot at `price_micros` per hour."""
    name = f"priced-{uuid.uuid4().hex[:6]}"
    accelerator = Accelerator.objects.create(
        name=name, display_name="Priced slot", vendor="cpu", memory_gb=0, gpu_counts=[1]
    )
    Offer.objects.create(
        provider=Provider.objects.get(name="local"),
        accelerator=accelerator,
        gpu_counts=[1],
        capacity=1,
        price_per_gpu_hour_micros=price_micros,
        min_price_per_gpu_hour_micros=price_micros,
        max_price_per_gpu_hour_micros=price_micros,
    )
    return name


def _submit(api, accelerator: str, command: list[str]) -> dict:
    response = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json={
            "name": "billed",
            "compute": {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": command},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()


def _usage(job_id: str) -> list[Transfer]:
    return list(Transfer.objects.filter(job__public_id=job_id, code="usage").order_by("id"))


def test_a_one_dollar_budget_terminates_a_sixty_dollar_an_hour_job_within_a_pass(api, compute_org):
    Budget.objects.create(
        public_id="bud_it",
        organization=compute_org,
        period="month",
        limit_micros=1_000_000,
        action="terminate",
    )
    dear = _accelerator(60_000_000)  # $1 a billed minute: a wall second here
    job = _submit(api, dear, ["bash", "-c", "sleep 600"])
    done = api.wait_state(job["id"], TERMINAL, timeout=30)
    assert (done["state"], done["reason"]) == ("terminated", "budget_exhausted")
    # Over the limit by at most one minute's price.
    assert 1.0 <= done["accrued_usd"] <= 2.0
    assert sum(t.amount_micros for t in _usage(job["id"])) == round(done["accrued_usd"] * 1e6)
    assert ledger.balance(compute_org.pk).held_micros == 0


def test_worker_and_beat_killed_mid_run_bill_every_minute_once(api, stack, compute_org):
    priced = _accelerator(6_000_000)  # $0.10 a billed minute
    job = _submit(api, priced, ["bash", "-c", "sleep 12"])
    api.wait_state(job["id"], "running")
    wait_for(lambda: len(_usage(job["id"])) >= 2, 20, "a few minutes posted")
    stack.procs["worker"].stop(signal.SIGKILL)
    stack.procs["beat"].stop(signal.SIGKILL)
    try:
        time.sleep(3)  # three billed minutes with nobody supervising: the point of the test
    finally:
        stack.start_worker()
        stack.start_beat()
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded"

    attempt = Attempt.objects.get(job__public_id=job["id"])
    rows = _usage(job["id"])
    # Continuous: each transfer picks up where the last one ended, from minute 0 to the end.
    covered = 0
    for row in rows:
        assert row.minutes_to - row.minutes == covered, [(r.minutes, r.minutes_to) for r in rows]
        covered = row.minutes_to
    assert covered == attempt.billed_minutes >= 12
    assert len({row.idempotency_key for row in rows}) == len(rows)
    assert (
        sum(row.amount_micros for row in rows)
        == Job.objects.get(public_id=job["id"]).accrued_micros
    )
