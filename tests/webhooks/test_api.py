"""`/api/v1/webhooks`: admins manage their organization's webhooks; the secret is shown
once and stored encrypted; members and viewers get 403; another organization's webhook is
a 404; a URL on a non-public address is refused unless the operator allows it."""

from __future__ import annotations

import pytest

from apps.accounts.models import Role
from apps.webhooks.models import Delivery, Webhook

pytestmark = pytest.mark.django_db

PUBLIC_URL = "http://93.184.216.34/hooks"  # an IP literal: no DNS needed to vet it


def _create(client, **overrides):
    body = {"url": PUBLIC_URL, "events": ["job.failed", "job.succeeded"], **overrides}
    return client.post("/api/v1/webhooks", body, format="json")


def test_an_admin_creates_a_webhook_and_sees_its_secret_once(org, api_client_for):
    client = api_client_for(org, Role.ADMIN)

    created = _create(client, format="slack", description="ops channel")

    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["job.succeeded", "job.failed"]  # in the vocabulary's order
    assert (body["format"], body["enabled"], body["url"]) == ("slack", True, PUBLIC_URL)
    stored = Webhook.objects.get(public_id=body["id"])
    assert stored.organization == org
    assert body["secret"] not in stored.secret_ciphertext
    again = client.get(f"/api/v1/webhooks/{body['id']}")
    assert again.status_code == 200
    assert "secret" not in again.json()
    listed = client.get("/api/v1/webhooks").json()
    assert [w["id"] for w in listed["data"]] == [body["id"]] and listed["total"] == 1


def test_rotating_the_secret_answers_a_new_one_and_patch_changes_only_what_it_names(
    org, api_client_for
):
    client = api_client_for(org, Role.OWNER)
    created = _create(client).json()

    rotated = client.post(f"/api/v1/webhooks/{created['id']}/rotate-secret")
    patched = client.patch(f"/api/v1/webhooks/{created['id']}", {"enabled": False}, format="json")

    assert rotated.status_code == 200
    assert rotated.json()["secret"].startswith("whsec_")
    assert rotated.json()["secret"] != created["secret"]
    assert patched.status_code == 200
    assert (patched.json()["enabled"], patched.json()["events"]) == (False, created["events"])


@pytest.mark.parametrize(
    ("body", "param", "error_type"),
    [
        ({"events": ["job.exploded"]}, "events.0", "invalid_request"),
        ({"events": []}, "events", "invalid_request"),
        ({"url": "ftp://93.184.216.34/x"}, "url", "webhook_url_invalid"),
        ({"url": "http://user:pw@93.184.216.34/x"}, "url", "webhook_url_invalid"),
        ({"format": "xml"}, "format", "invalid_request"),
    ],
    ids=["unknown-event", "no-events", "ftp-scheme", "credentials-in-url", "unknown-format"],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(
    org, api_client_for, body, param, error_type
):
    answer = _create(api_client_for(org, Role.ADMIN), **body)

    assert answer.status_code == 400
    assert (answer.json()["error"]["param"], answer.json()["error"]["type"]) == (param, error_type)
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://10.1.2.3/hook",
        "http://192.168.1.20/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fd00::1]/hook",
        "http://0.0.0.0/hook",
        "http://100.64.0.1/hook",
        "http://localhost:8000/hook",
    ],
    ids=[
        "loopback-v4",
        "private-10",
        "private-192-168",
        "metadata-link-local",
        "loopback-v6",
        "v4-mapped-loopback",
        "unique-local-v6",
        "unspecified",
        "shared-cgnat",
        "localhost-name",
    ],
)
def test_a_non_public_target_is_refused_without_the_operator_setting(
    org, api_client_for, settings, url
):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    client = api_client_for(org, Role.ADMIN)
    existing = _create(client).json()

    created = _create(client, url=url)
    patched = client.patch(f"/api/v1/webhooks/{existing['id']}", {"url": url}, format="json")

    for answer in (created, patched):
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "webhook_url_forbidden"
        assert answer.json()["error"]["param"] == "url"
    assert list(Webhook.objects.values_list("url", flat=True)) == [PUBLIC_URL]


def test_the_operator_setting_allows_a_loopback_target(org, api_client_for, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True

    created = _create(api_client_for(org, Role.ADMIN), url="http://localhost:9/hook")

    assert created.status_code == 201


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER], ids=["member", "viewer"])
def test_members_and_viewers_may_neither_read_nor_manage_webhooks(org, api_client_for, role):
    webhook = _create(api_client_for(org, Role.ADMIN)).json()
    client = api_client_for(org, role)

    answers = [
        client.get("/api/v1/webhooks"),
        _create(client),
        client.get(f"/api/v1/webhooks/{webhook['id']}"),
        client.patch(f"/api/v1/webhooks/{webhook['id']}", {"enabled": False}, format="json"),
        client.delete(f"/api/v1/webhooks/{webhook['id']}"),
        client.post(f"/api/v1/webhooks/{webhook['id']}/test"),
        client.get(f"/api/v1/webhooks/{webhook['id']}/deliveries"),
    ]

    assert [answer.status_code for answer in answers] == [403] * 7
    assert answers[0].json()["error"]["type"] == "permission_denied"
    assert Webhook.objects.get().enabled is True
    assert not Delivery.objects.exists()


def test_another_organizations_webhook_is_not_found(org, other_org, api_client_for):
    theirs = _create(api_client_for(other_org, Role.OWNER)).json()
    client = api_client_for(org, Role.OWNER)

    answers = [
        client.get(f"/api/v1/webhooks/{theirs['id']}"),
        client.patch(f"/api/v1/webhooks/{theirs['id']}", {"enabled": False}, format="json"),
        client.delete(f"/api/v1/webhooks/{theirs['id']}"),
        client.post(f"/api/v1/webhooks/{theirs['id']}/test"),
        client.post(f"/api/v1/webhooks/{theirs['id']}/rotate-secret"),
        client.get(f"/api/v1/webhooks/{theirs['id']}/deliveries"),
    ]

    assert [answer.status_code for answer in answers] == [404] * 6
    assert client.get("/api/v1/webhooks").json()["data"] == []
    assert Webhook.objects.get().enabled is True
    assert not Delivery.objects.exists()


def test_send_test_queues_a_ping_that_the_delivery_log_lists(org, api_client_for):
    client = api_client_for(org, Role.ADMIN)
    webhook = _create(client).json()

    sent = client.post(f"/api/v1/webhooks/{webhook['id']}/test")
    log = client.get(f"/api/v1/webhooks/{webhook['id']}/deliveries")

    assert sent.status_code == 202
    assert (sent.json()["event_type"], sent.json()["status"]) == ("ping", "pending")
    assert [(d["id"], d["event_type"], d["attempts"]) for d in log.json()["data"]] == [
        (sent.json()["id"], "ping", 0)
    ]
