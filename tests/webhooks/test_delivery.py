"""Delivering an event to a real receiver on loopback (the operator setting allows it here),
one attempt at a time, as the `webhooks.deliver` task makes them: what the receiver gets and
can verify, what the log records, and when the next attempt is due."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.jobs import tasks as job_tasks
from apps.jobs.states import JobState
from apps.webhooks import delivery, services, signing
from apps.webhooks.models import Delivery, Webhook
from tests.jobs.helpers import make_job
from tests.webhooks.receiver import loopback_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def loopback_allowed(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.WEBHOOK_RETRY_BASE_S = 30
    return settings


def _webhook(org, url: str, **options) -> tuple[Webhook, str]:
    return services.webhook_create(
        organization=org, url=url, events=["job.failed", "job.succeeded"], **options
    )


def test_a_failed_job_is_delivered_once_signed_with_the_webhooks_secret(org, loopback_allowed):
    job = make_job(org)
    with loopback_receiver([204]) as receiver:
        webhook, secret = _webhook(org, receiver.url)
        job_tasks.job_outcome(job.pk, JobState.FAILED)  # the outcome task, as the worker runs it
        job_tasks.job_outcome(job.pk, JobState.FAILED)  # told twice: still one delivery
        (sent,) = Delivery.objects.filter(webhook=webhook)
        delivery.attempt(sent.pk)
        delivery.attempt(sent.pk)  # a second run of the task finds it done

    (request,) = receiver.requests
    assert request.path == "/hooks/trainyard"
    assert request.headers["Trainyard-Event"] == "job.failed"
    assert request.headers["Trainyard-Delivery"] == sent.public_id
    assert signing.verify(
        secret, request.headers["Trainyard-Signature"], request.body, now=int(time.time())
    )
    assert not signing.verify(
        "whsec_wrong", request.headers["Trainyard-Signature"], request.body, now=int(time.time())
    )
    body = json.loads(request.body)
    assert (body["id"], body["type"]) == (sent.event_id, "job.failed")
    assert body["organization"] == {"slug": "acme", "name": "Acme"}
    assert body["data"]["job"]["id"] == job.public_id
    assert body["data"]["job"]["state"] == "failed"
    sent.refresh_from_db()
    assert (sent.status, sent.attempts, sent.response_code) == ("succeeded", 1, 204)
    assert [(a.number, a.response_code) for a in sent.attempt_rows.all()] == [(1, 204)]


def test_events_reach_only_the_subscribed_enabled_webhooks_of_the_jobs_organization(
    org, other_org, loopback_allowed
):
    job = make_job(org)
    url = "http://127.0.0.1:9/hook"
    subscribed, _ = _webhook(org, url)
    services.webhook_create(organization=org, url=url, events=["job.succeeded"])
    _webhook(org, url, enabled=False)
    _webhook(other_org, url)

    job_tasks.job_outcome(job.pk, JobState.FAILED)

    assert list(Delivery.objects.values_list("webhook_id", "event_type")) == [
        (subscribed.pk, "job.failed")
    ]


def test_a_receiver_that_fails_gets_retries_with_growing_delays_until_the_window_ends(
    org, loopback_allowed
):
    with loopback_receiver([500]) as receiver:
        webhook, _ = _webhook(org, receiver.url)
        ping = services.webhook_ping(webhook=webhook)
        waits = []
        for _ in range(3):
            before = timezone.now()
            delivery.attempt(ping.pk)
            ping.refresh_from_db()
            waits.append(round((ping.next_attempt_at - before).total_seconds()))
            delivery.attempt(ping.pk)  # not due yet: no request
            Delivery.objects.filter(pk=ping.pk).update(next_attempt_at=timezone.now())
        Delivery.objects.filter(pk=ping.pk).update(give_up_at=timezone.now())
        delivery.attempt(ping.pk)

    assert waits == [30, 60, 120]
    assert len(receiver.requests) == 4
    ping.refresh_from_db()
    assert (ping.status, ping.attempts, ping.response_code) == ("failed", 4, 500)
    assert ping.last_error.startswith("HTTP 500")
    assert ping.next_attempt_at is None
    assert [a.response_code for a in ping.attempt_rows.all()] == [500, 500, 500, 500]


def test_the_target_is_vetted_again_at_delivery(org, loopback_allowed):
    with loopback_receiver([200]) as receiver:
        webhook, _ = _webhook(org, receiver.url)  # allowed when it was saved
        ping = services.webhook_ping(webhook=webhook)
        loopback_allowed.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
        delivery.attempt(ping.pk)

    assert receiver.requests == []
    ping.refresh_from_db()
    assert (ping.status, ping.attempts, ping.response_code) == ("pending", 1, None)
    assert ping.last_error.startswith("webhook_url_forbidden")


def test_a_slack_webhook_gets_a_text_body(org, loopback_allowed):
    job = make_job(org, name="llama-lora")
    with loopback_receiver([200]) as receiver:
        webhook, secret = _webhook(org, receiver.url, format="slack")
        job_tasks.job_outcome(job.pk, JobState.FAILED)
        delivery.attempt(Delivery.objects.get(webhook=webhook).pk)

    (request,) = receiver.requests
    body = json.loads(request.body)
    assert list(body) == ["text"]
    assert body["text"].startswith("[Acme] Job llama-lora failed")
    assert f"/o/acme/jobs/{job.public_id}/" in body["text"]
    assert signing.verify(
        secret, request.headers["Trainyard-Signature"], request.body, now=int(time.time())
    )


def test_a_disabled_webhook_sends_nothing_but_a_test(org, loopback_allowed):
    with loopback_receiver([200]) as receiver:
        webhook, _ = _webhook(org, receiver.url)
        job = make_job(org)
        job_tasks.job_outcome(job.pk, JobState.FAILED)
        queued = Delivery.objects.get(webhook=webhook)
        services.webhook_update(webhook=webhook, enabled=False)
        ping = services.webhook_ping(webhook=webhook)
        delivery.attempt(queued.pk)
        delivery.attempt(ping.pk)

    assert [json.loads(r.body)["type"] for r in receiver.requests] == ["ping"]
    queued.refresh_from_db()
    assert (queued.status, queued.last_error) == ("failed", "The webhook is disabled.")


def test_the_sweep_queues_only_pending_deliveries_that_are_due(org, loopback_allowed):
    webhook, _ = _webhook(org, "http://127.0.0.1:9/hook")
    due = services.webhook_ping(webhook=webhook)
    later = services.webhook_ping(webhook=webhook)
    done = services.webhook_ping(webhook=webhook)
    Delivery.objects.filter(pk=later.pk).update(
        next_attempt_at=timezone.now() + timedelta(minutes=5)
    )
    Delivery.objects.filter(pk=done.pk).update(status=Delivery.Status.SUCCEEDED)

    assert delivery.sweep() == 1
    assert Delivery.objects.get(pk=due.pk).status == "pending"


def test_key_rotation_re_encrypts_webhook_secrets_and_signing_still_uses_them(
    org, other_org, settings
):
    webhook, secret = _webhook(org, "http://93.184.216.34/hook")
    lost, _ = _webhook(other_org, "http://93.184.216.34/hook")
    old_key = settings.SECRETS_KEYS[0]
    new_key = Fernet.generate_key().decode()
    Webhook.objects.filter(pk=lost.pk).update(
        secret_ciphertext=Fernet(Fernet.generate_key()).encrypt(b"{}").decode()
    )
    settings.SECRETS_KEYS = [new_key, old_key]

    with pytest.raises(CommandError, match="1 webhook secrets could not be decrypted"):
        call_command("rotate_webhook_secrets")

    settings.SECRETS_KEYS = [new_key]  # the old key dropped: the rotated secret still opens
    webhook.refresh_from_db()
    assert services.webhook_secret(webhook) == secret
