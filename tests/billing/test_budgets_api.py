"""Budgets through `/api/v1/billing/budgets`: any member reads them, admins and owners write
them, a project's budget nests inside its organization's of the same period, and another
organization's budgets and projects are not found."""

from __future__ import annotations

import pytest

from apps.accounts.models import Role
from apps.billing.models import Budget

pytestmark = pytest.mark.django_db
URL = "/api/v1/billing/budgets"


@pytest.fixture
def admin_api(api_client_for, org):
    return api_client_for(org, Role.ADMIN)


def create(api, **body):
    return api.post(URL, {"limit_usd": 100, **body}, format="json")


def error(response) -> tuple[int, str, str | None]:
    problem = response.json()["error"]
    return response.status_code, problem["type"], problem["param"]


def test_an_admin_creates_an_organization_budget_with_the_defaults(admin_api, org):
    response = create(admin_api, name="Monthly cap", limit_usd="250.5")
    assert response.status_code == 201
    body = response.json()
    assert body["id"].startswith("bud_")
    assert body | {"id": None, "period_start": None, "created_at": None, "updated_at": None} == {
        "id": None,
        "name": "Monthly cap",
        "scope": "organization",
        "project": None,
        "project_name": None,
        "period": "month",
        "limit_ucredits": 250_500_000,
        "limit_usd": 250.5,
        "action": "alert",
        "thresholds": [50, 80, 100],
        "spent_ucredits": 0,
        "spent_usd": 0.0,
        "percent": 0.0,
        "period_start": None,
        "created_at": None,
        "updated_at": None,
    }
    budget = Budget.objects.get(public_id=body["id"])
    assert (budget.organization, budget.limit_micros) == (org, 250_500_000)


def test_a_project_budget_names_its_project_and_sorts_its_thresholds(admin_api, project):
    response = create(
        admin_api,
        project=project.public_id,
        period="day",
        action="terminate",
        thresholds=[100, 25, 80, 25],
        limit_usd=5,
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["scope"], body["project"], body["project_name"]) == (
        "project",
        project.public_id,
        "Vision",
    )
    assert (body["period"], body["action"], body["thresholds"]) == (
        "day",
        "terminate",
        [25, 80, 100],
    )


def test_members_and_viewers_read_but_only_admins_and_owners_write(api_client_for, org):
    made = create(api_client_for(org, Role.OWNER)).json()
    for role in (Role.MEMBER, Role.VIEWER):
        api = api_client_for(org, role)
        assert api.get(URL).json()["total"] == 1
        assert api.get(f"{URL}/{made['id']}").status_code == 200
        assert error(create(api)) == (403, "permission_denied", None)
        patch = api.patch(f"{URL}/{made['id']}", {"limit_usd": 1}, format="json")
        assert error(patch) == (403, "permission_denied", None)
        assert error(api.delete(f"{URL}/{made['id']}")) == (403, "permission_denied", None)
    assert Budget.objects.get().limit_micros == 100_000_000


def test_an_admin_changes_and_deletes_a_budget(admin_api):
    made = create(admin_api).json()
    response = admin_api.patch(
        f"{URL}/{made['id']}", {"limit_usd": 40, "action": "block", "name": "tight"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["limit_usd"], body["action"], body["name"], body["period"]) == (
        40.0,
        "block",
        "tight",
        "month",
    )
    assert admin_api.delete(f"{URL}/{made['id']}").status_code == 204
    assert error(admin_api.get(f"{URL}/{made['id']}")) == (404, "not_found", None)
    assert not Budget.objects.exists()


def test_a_project_budget_may_not_exceed_the_organizations_of_the_same_period(admin_api, project):
    create(admin_api, limit_usd=100, period="month")
    response = create(admin_api, project=project.public_id, limit_usd=150, period="month")
    assert error(response) == (400, "invalid_request", "limit_usd")
    assert "$150.00" in response.json()["error"]["message"]
    assert "$100.00" in response.json()["error"]["message"]
    # another period is not bound by it
    week = create(admin_api, project=project.public_id, limit_usd=150, period="week")
    assert week.status_code == 201


def test_raising_a_project_budget_past_the_organizations_is_refused(admin_api, project):
    create(admin_api, limit_usd=100)
    made = create(admin_api, project=project.public_id, limit_usd=60).json()
    response = admin_api.patch(f"{URL}/{made['id']}", {"limit_usd": 101}, format="json")
    assert error(response) == (400, "invalid_request", "limit_usd")
    equal = admin_api.patch(f"{URL}/{made['id']}", {"limit_usd": 100}, format="json")
    assert equal.status_code == 200


def test_lowering_the_organizations_budget_below_a_projects_is_refused(admin_api, project):
    org_budget = create(admin_api, limit_usd=100).json()
    create(admin_api, project=project.public_id, limit_usd=80)
    response = admin_api.patch(f"{URL}/{org_budget['id']}", {"limit_usd": 50}, format="json")
    assert error(response) == (400, "invalid_request", "limit_usd")
    message = response.json()["error"]["message"]
    assert "$50.00" in message and "$80.00" in message
    assert Budget.objects.get(public_id=org_budget["id"]).limit_micros == 100_000_000
    # nor may a new organization budget start below it
    assert error(create(admin_api, limit_usd=79)) == (400, "invalid_request", "limit_usd")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"limit_usd": 0}, "limit_usd"),
        ({"limit_usd": -5}, "limit_usd"),
        ({"limit_usd": "lots"}, "limit_usd"),
        ({"limit_usd": 1.0000001}, "limit_usd"),
        ({"period": "year"}, "period"),
        ({"action": "pause"}, "action"),
        ({"thresholds": [0]}, "thresholds"),
        ({"thresholds": [101]}, "thresholds"),
        ({"thresholds": []}, "thresholds"),
        ({"thresholds": "50"}, "thresholds"),
        ({"color": "red"}, "color"),
    ],
)
def test_invalid_fields_are_400_naming_them(admin_api, body, param):
    status, kind, named = error(create(admin_api, **body))
    assert (status, kind) == (400, "invalid_request")
    assert named.split(".")[0] == param
    assert not Budget.objects.exists()


def test_a_limit_is_required_to_create(admin_api):
    response = admin_api.post(URL, {"name": "no limit"}, format="json")
    assert error(response) == (400, "invalid_request", "limit_usd")


def test_another_organizations_project_and_budgets_are_not_found(
    admin_api, api_client_for, other_org, other_project
):
    response = create(admin_api, project=other_project.public_id)
    assert error(response) == (404, "not_found", "project")
    theirs = create(api_client_for(other_org, Role.ADMIN)).json()
    assert admin_api.get(URL).json() == {"data": [], "next_cursor": None, "total": 0}
    for method in ("get", "delete"):
        assert error(getattr(admin_api, method)(f"{URL}/{theirs['id']}"))[:2] == (404, "not_found")
    patch = admin_api.patch(f"{URL}/{theirs['id']}", {"limit_usd": 1}, format="json")
    assert error(patch)[:2] == (404, "not_found")
    assert Budget.objects.get(public_id=theirs["id"]).limit_micros == 100_000_000


def test_the_list_pages_by_cursor_oldest_first(admin_api):
    made = [create(admin_api, name=f"b{n}", period="lifetime").json()["id"] for n in range(5)]
    first = admin_api.get(URL, {"limit": 3}).json()
    second = admin_api.get(URL, {"limit": 3, "cursor": first["next_cursor"]}).json()
    assert [b["id"] for b in first["data"] + second["data"]] == made
    assert (first["total"], second["next_cursor"]) == (5, None)
