"""Webhooks through the live stack: a job that fails for real is told by the worker to a
receiver this test runs on loopback (the operator setting allows it, and a small retry base
keeps the test short). The receiver answers 500 twice, then 204: the worker retries with
growing delays, every request verifies, and the settings page shows the delivery's log."""

from __future__ import annotations

import json
import time

import pytest

from apps.accounts.models import Role
from apps.webhooks import services, signing
from apps.webhooks.models import Delivery
from tests.factories import MembershipFactory, UserFactory
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for
from tests.webhooks.receiver import loopback_receiver

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

WORKER_ENV = {"WEBHOOK_ALLOW_PRIVATE_TARGETS": "1", "WEBHOOK_RETRY_BASE_S": "0.5"}


@pytest.fixture
def webhook_worker(live_stack):
    """The stack's worker, restarted with the loopback receiver allowed and a 0.5 s retry
    base; restarted as it was afterwards."""
    live_stack.procs["worker"].stop()
    live_stack.start_worker(**WORKER_ENV)
    try:
        yield live_stack
    finally:
        live_stack.procs["worker"].stop()
        live_stack.start_worker()


def test_a_failed_job_is_delivered_signed_and_retried_with_growing_delays(
    webhook_worker, api, compute_org, settings, client_for
):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # this process saves the webhook
    with loopback_receiver([500, 500, 204]) as receiver:
        webhook, secret = services.webhook_create(
            organization=compute_org, url=receiver.url, events=["job.failed"]
        )
        job = api.submit(command=["bash", "-c", "exit 3"])
        assert api.wait_state(job["id"], TERMINAL)["state"] == "failed"
        delivered = wait_for(
            lambda: Delivery.objects.filter(webhook=webhook, status="succeeded").first(),
            timeout=60,
            what="the delivery to succeed on its third attempt",
        )

    assert len(receiver.requests) == 3
    first, second, third = (request.at for request in receiver.requests)
    assert 0.5 <= second - first < third - second  # 0.5 s, then 1 s
    now = int(time.time())
    for request in receiver.requests:
        assert request.headers["Trainyard-Delivery"] == delivered.public_id
        assert signing.verify(secret, request.headers["Trainyard-Signature"], request.body, now=now)
        body = json.loads(request.body)
        assert (body["type"], body["data"]["job"]["id"]) == ("job.failed", job["id"])
        assert body["data"]["job"]["reason"] == "exit_code_3"
    assert (delivered.attempts, delivered.response_code) == (3, 204)
    assert [a.response_code for a in delivered.attempt_rows.all()] == [500, 500, 204]

    admin = UserFactory()
    MembershipFactory(organization=compute_org, user=admin, role=Role.ADMIN)
    page = client_for(admin).get(f"/o/{compute_org.slug}/settings/webhooks/").content.decode()
    row = page.split(f'id="delivery-{delivered.public_id}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="delivery-status">succeeded</td>' in row
    assert '<td class="delivery-code">204</td>' in row
    assert ">3</td>" in row
