"""`GET /api/v1/billing/transactions`: the wallet's history, newest first, by cursor, with
each transfer's direction relative to the wallet and the job and attempt it concerns."""

from __future__ import annotations

import pytest

from apps.accounts.models import Role
from apps.billing import holds, ledger
from apps.billing.models import Transfer
from tests.billing.api_helpers import PRICE, billed_job, roomy_offer

pytestmark = pytest.mark.django_db
URL = "/api/v1/billing/transactions"


@pytest.fixture(autouse=True)
def offer(make_offer):
    return roomy_offer(make_offer)


def test_a_fresh_organization_shows_its_grant_as_a_credit(api_client_for, org):
    response = api_client_for(org, Role.VIEWER).get(URL)
    assert response.status_code == 200
    body = response.json()
    assert body["total"] == 1
    assert body["next_cursor"] is None
    grant = body["data"][0]
    assert grant["id"].startswith("txn_")
    assert grant | {"id": None, "created_at": None} == {
        "id": None,
        "created_at": None,
        "code": "grant",
        "state": "posted",
        "direction": "credit",
        "amount_ucredits": 1_000_000_000,
        "amount_usd": 1000.0,
        "resolves": None,
        "project": None,
        "job": None,
        "attempt": None,
        "minutes": None,
        "memo": "test credits",
    }


def test_a_jobs_hold_void_and_usage_appear_newest_first(api_client_for, org):
    job = billed_job(org, minutes=3)
    holds.release_holds(job.pk)
    data = api_client_for(org).get(URL).json()["data"]

    assert [(t["code"], t["state"], t["direction"]) for t in data] == [
        ("hold", "voided", "debit"),
        ("usage", "posted", "debit"),
        ("hold", "pending", "debit"),
        ("grant", "posted", "credit"),
    ]
    void, usage, hold = data[0], data[1], data[2]
    assert void["resolves"] == hold["id"]
    assert hold["amount_ucredits"] == void["amount_ucredits"] == 2 * PRICE
    assert usage["job"] == hold["job"] == job.public_id
    assert usage["project"] == job.project.public_id
    assert (usage["attempt"], usage["minutes"]) == (1, 3)
    assert (usage["amount_ucredits"], usage["amount_usd"]) == (30_000, 0.03)
    assert hold["attempt"] is None and hold["minutes"] is None


def test_code_filters_and_an_unknown_code_is_400(api_client_for, org):
    billed_job(org, minutes=2)
    api = api_client_for(org)
    usage = api.get(URL, {"code": "usage"}).json()
    assert [t["code"] for t in usage["data"]] == ["usage"]
    assert usage["total"] == 1
    response = api.get(URL, {"code": "bonus"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == "code"


def test_pages_follow_the_cursor_without_gaps_or_repeats(api_client_for, org):
    for n in range(6):
        ledger.grant(organization=org, amount_micros=n + 1, idempotency_key=f"page-{n}")
    api = api_client_for(org)
    seen, cursor = [], None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = api.get(URL, params).json()
        assert body["total"] == 7
        seen += [t["amount_ucredits"] for t in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [6, 5, 4, 3, 2, 1, 1_000_000_000]


def test_a_bad_cursor_or_limit_is_400(api_client_for, org):
    api = api_client_for(org)
    assert api.get(URL, {"cursor": "not-ours"}).json()["error"]["param"] == "cursor"
    assert api.get(URL, {"limit": 0}).json()["error"]["param"] == "limit"


def test_another_organizations_transfers_never_appear(api_client_for, org, other_org):
    billed_job(other_org, minutes=5)
    ids = {t.pk for t in Transfer.objects.filter(organization=other_org)}
    body = api_client_for(org).get(URL, {"limit": 200}).json()
    assert body["total"] == 1
    assert {int(t["id"].removeprefix("txn_")) for t in body["data"]}.isdisjoint(ids)
