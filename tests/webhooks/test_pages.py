"""The Webhooks settings page: admins add webhooks (the secret shown once), see each one's
delivery log and send a test; members see no controls and are refused; another
organization's webhook is a 404."""

from __future__ import annotations

import pytest

from apps.webhooks import services
from apps.webhooks.models import Delivery, Webhook

pytestmark = pytest.mark.django_db

PAGE = "/o/acme/settings/webhooks/"


def test_an_admin_adds_a_webhook_and_sees_its_secret_once(admin, client_for):
    client = client_for(admin)

    added = client.post(
        PAGE, {"url": "http://93.184.216.34/hook", "events": ["job.failed"], "format": "json"}
    )
    again = client.get(PAGE)

    webhook = Webhook.objects.get()
    assert added.status_code == 200
    assert 'id="new-webhook-secret"' in added.content.decode()
    assert 'id="new-webhook-secret"' not in again.content.decode()
    assert f'id="webhook-{webhook.public_id}"' in again.content.decode()
    assert "Send test" in again.content.decode()


def test_a_refused_url_is_shown_on_the_form(admin, client_for, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False

    answer = client_for(admin).post(
        PAGE, {"url": "http://169.254.169.254/latest", "events": ["job.failed"], "format": "json"}
    )

    assert answer.status_code == 200
    assert "a link-local address" in answer.content.decode()
    assert not Webhook.objects.exists()


def test_send_test_answers_the_card_with_the_ping_in_its_log(org, admin, client_for):
    webhook, _ = services.webhook_create(
        organization=org, url="http://93.184.216.34/hook", events=["job.failed"]
    )

    answer = client_for(admin).post(f"{PAGE}{webhook.public_id}/test/", HTTP_HX_REQUEST="true")

    page = answer.content.decode()
    ping = Delivery.objects.get(webhook=webhook)
    assert answer.status_code == 200
    assert page.startswith(f'<section class="card webhook" id="webhook-{webhook.public_id}"')
    assert f'id="delivery-{ping.public_id}"' in page
    assert 'hx-trigger="every 2s"' in page  # it polls while the ping is pending


def test_members_see_no_controls_and_are_refused(org, member, client_for):
    webhook, _ = services.webhook_create(
        organization=org, url="http://93.184.216.34/hook", events=["job.failed"]
    )
    client = client_for(member)

    page = client.get(PAGE).content.decode()
    refused = [
        client.post(PAGE, {"url": "http://93.184.216.34/x", "events": ["job.failed"]}),
        client.post(f"{PAGE}{webhook.public_id}/test/"),
        client.post(f"{PAGE}{webhook.public_id}/delete/"),
    ]

    assert 'id="webhooks-admin-only"' in page
    assert "93.184.216.34" not in page and "Send test" not in page
    assert [answer.status_code for answer in refused] == [403, 403, 403]
    assert list(Webhook.objects.all()) == [webhook]
    assert not Delivery.objects.exists()


def test_another_organizations_webhook_is_not_found(org, other_org, admin, client_for):
    theirs, _ = services.webhook_create(
        organization=other_org, url="http://93.184.216.34/hook", events=["job.failed"]
    )
    client = client_for(admin)

    answers = [
        client.get(f"{PAGE}{theirs.public_id}/"),
        client.post(f"{PAGE}{theirs.public_id}/test/"),
        client.post(f"{PAGE}{theirs.public_id}/delete/"),
        client.get("/o/globex/settings/webhooks/"),
    ]

    assert [answer.status_code for answer in answers] == [404, 404, 404, 404]
    assert Webhook.objects.filter(pk=theirs.pk).exists()
    assert not Delivery.objects.exists()
