"""`GET /api/v1/billing/balance` and `/summary`: what the organization has, holds, burns and
spent, in micro-dollars and dollars, for any member and only for its own organization."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.accounts.models import Role
from apps.billing.models import Budget
from tests.billing.api_helpers import PRICE, billed_job, roomy_offer
from tests.factories import OrganizationFactory, ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def offer(make_offer):
    return roomy_offer(make_offer)


def test_a_fresh_organization_has_its_grant_available_and_burns_nothing(api_client_for, org):
    response = api_client_for(org, Role.VIEWER).get("/api/v1/billing/balance")
    assert response.status_code == 200
    assert response.json() == {
        "balance_ucredits": 1_000_000_000,
        "balance_usd": 1000.0,
        "held_ucredits": 0,
        "held_usd": 0.0,
        "available_ucredits": 1_000_000_000,
        "available_usd": 1000.0,
        "burn_ucredits_hr": 0,
        "burn_usd_hr": 0.0,
    }


def test_a_running_job_holds_burns_and_spends(api_client_for, org):
    billed_job(org, minutes=10, end=False)
    body = api_client_for(org).get("/api/v1/billing/balance").json()
    hold = 2 * PRICE  # two hours at the ceiling
    spent = 10 * PRICE // 60
    assert body["balance_ucredits"] == 1_000_000_000 - spent
    assert body["held_ucredits"] == hold
    assert body["available_ucredits"] == 1_000_000_000 - spent - hold
    assert body["available_usd"] == pytest.approx(1000 - 0.1 - 1.2)
    assert (body["burn_ucredits_hr"], body["burn_usd_hr"]) == (PRICE, 0.6)


def test_another_organizations_money_is_never_shown(api_client_for, org, other_org):
    billed_job(other_org, minutes=30, end=False)
    body = api_client_for(org).get("/api/v1/billing/balance").json()
    assert body["balance_ucredits"] == 1_000_000_000
    assert body["held_ucredits"] == 0
    assert body["burn_ucredits_hr"] == 0


def test_an_organization_never_granted_anything_has_zeros(api_client_for):
    broke = OrganizationFactory(credits_usd=0)
    body = api_client_for(broke).get("/api/v1/billing/balance").json()
    assert body["balance_ucredits"] == body["available_ucredits"] == 0


def test_billing_needs_authentication_and_compute(client, api_client_for):
    assert client.get("/api/v1/billing/balance").json()["error"]["type"] == "unauthenticated"
    disabled = OrganizationFactory(compute_enabled=False)
    response = api_client_for(disabled).get("/api/v1/billing/summary")
    assert (response.status_code, response.json()["error"]["type"]) == (403, "tenant_disabled")


def test_a_signed_in_member_reads_the_balance_with_a_session(client_for, member):
    response = client_for(member).get("/api/v1/billing/balance")
    assert response.status_code == 200
    assert response.json()["balance_usd"] == 1000.0


def test_the_summary_has_this_months_spend_budgets_and_spend_per_day(api_client_for, org, project):
    billed_job(org, minutes=20, project=project.public_id)
    billed_job(org, minutes=10)
    Budget.objects.create(
        public_id="bud_month", organization=org, period="month", limit_micros=1_000_000
    )
    Budget.objects.create(
        public_id="bud_vision",
        organization=org,
        project=project,
        period="day",
        limit_micros=400_000,
        action="block",
        thresholds=[50, 100],
    )
    body = api_client_for(org, Role.VIEWER).get("/api/v1/billing/summary").json()

    assert body["spent_this_month_ucredits"] == 300_000
    assert body["spent_this_month_usd"] == 0.3
    assert body["balance_ucredits"] == 1_000_000_000 - 300_000
    budgets = {b["id"]: b for b in body["budgets"]}
    assert budgets["bud_month"] | {"created_at": None, "updated_at": None} == {
        "id": "bud_month",
        "name": "",
        "scope": "organization",
        "project": None,
        "project_name": None,
        "period": "month",
        "limit_ucredits": 1_000_000,
        "limit_usd": 1.0,
        "action": "alert",
        "thresholds": [],
        "spent_ucredits": 300_000,
        "spent_usd": 0.3,
        "percent": 30.0,
        "period_start": timezone.now()
        .replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        .isoformat(),
        "created_at": None,
        "updated_at": None,
    }
    vision = budgets["bud_vision"]
    assert (vision["scope"], vision["project"], vision["project_name"]) == (
        "project",
        project.public_id,
        "Vision",
    )
    assert (vision["spent_usd"], vision["percent"], vision["action"]) == (0.2, 50.0, "block")

    today = timezone.now().date().isoformat()
    per_day = {(d["day"], d["project_name"]): d for d in body["spend_per_day"]}
    assert per_day[(today, "Vision")] | {"project": None} == {
        "day": today,
        "project": None,
        "project_name": "Vision",
        "ucredits": 200_000,
        "usd": 0.2,
    }
    assert per_day[(today, "Vision")]["project"] == project.public_id
    assert per_day[(today, "Default")]["usd"] == 0.1


def test_the_summary_shows_only_the_callers_budgets_and_spend(api_client_for, org, other_org):
    billed_job(other_org, minutes=10)
    Budget.objects.create(public_id="bud_theirs", organization=other_org, limit_micros=5)
    ProjectFactory(organization=other_org)
    body = api_client_for(org).get("/api/v1/billing/summary").json()
    assert body["budgets"] == []
    assert body["spend_per_day"] == []
    assert body["spent_this_month_ucredits"] == 0
