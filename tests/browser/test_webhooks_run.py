"""Webhooks through the live stack and real Chromium. The web process runs without
`WEBHOOK_ALLOW_PRIVATE_TARGETS`, so the page refuses the test's loopback receiver; the
worker runs with it (the operator setting) and a 0.5 s retry base. A job that fails for real
is told to the receiver, which answers 500 twice, then 204: the worker retries with growing
delays, every request verifies, and the page shows the delivery's log. "Send test" (htmx,
CSRF from the page) then delivers a ping the card shows when it lands."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from apps.accounts.models import Role
from apps.webhooks import services, signing
from apps.webhooks.models import Delivery, Webhook
from tests.compute_api import TERMINAL
from tests.factories import MembershipFactory, UserFactory
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


def test_a_failed_job_is_delivered_signed_retried_and_logged_and_send_test_works(
    webhook_worker, api, compute_org, settings, signed_in
):
    admin = MembershipFactory(organization=compute_org, role=Role.ADMIN, user=UserFactory()).user
    page = signed_in(admin)
    page.goto(f"/o/{compute_org.slug}/settings/webhooks/")
    with loopback_receiver([500, 500, 204]) as receiver:
        page.get_by_label("URL").fill(receiver.url)
        page.get_by_label("A job failed").check()
        page.get_by_role("button", name="Add webhook").click()
        expect(page.get_by_text("a loopback address")).to_be_visible()
        assert not Webhook.objects.exists()

        settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # as the operator allows it
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
            assert signing.verify(
                secret, request.headers["Trainyard-Signature"], request.body, now=now
            )
            body = json.loads(request.body)
            assert (body["type"], body["data"]["job"]["id"]) == ("job.failed", job["id"])
            assert body["data"]["job"]["reason"] == "exit_code_3"
        assert (delivered.attempts, delivered.response_code) == (3, 204)
        assert [a.response_code for a in delivered.attempt_rows.all()] == [500, 500, 204]

        page.goto(f"/o/{compute_org.slug}/settings/webhooks/")
        row = page.locator(f"#delivery-{delivered.public_id}")
        expect(row.locator(".delivery-status")).to_have_text("succeeded")
        expect(row.locator(".delivery-code")).to_have_text("204")
        expect(row.locator(".delivery-attempts")).to_have_text("3")

        card = page.locator(f"#webhook-{webhook.public_id}")
        card.get_by_role("button", name="Send test").click()
        ping = card.locator("tr.delivery", has=page.locator("code", has_text="ping"))
        expect(ping.locator(".delivery-status")).to_have_text("succeeded", timeout=20_000)
        assert re.search(r"/settings/webhooks/$", page.url)  # swapped in place

    assert [json.loads(r.body)["type"] for r in receiver.requests][3:] == ["ping"]
