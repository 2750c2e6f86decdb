"""The budget editor on the Billing page: admins and owners create, change and delete
budgets through the budget services (the API's); members and viewers read them, see no
controls and are refused (403); another organization's budget is a 404; a refused form says
why at its field (400) and changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.accounts.models import Role
from apps.billing.models import Budget
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGE = "/o/acme/billing/"
CREATE = "/o/acme/billing/budgets/"


def _budget(org, public_id: str, limit_micros: int = 50_000_000, **fields) -> Budget:
    return Budget.objects.create(
        public_id=public_id,
        organization=org,
        limit_micros=limit_micros,
        thresholds=fields.pop("thresholds", [50, 80, 100]),
        **fields,
    )


def _form(**overrides) -> dict:
    return {
        "name": "research",
        "project": "",
        "period": "month",
        "limit_usd": "250.50",
        "action": "block",
        "thresholds": "90, 50",
        **overrides,
    }


@pytest.fixture
def owner(org):
    return MembershipFactory(organization=org, role=Role.OWNER, user=UserFactory()).user


@pytest.mark.parametrize("role", ["admin", "owner"])
def test_an_admin_or_owner_creates_a_budget_and_sees_it_listed(role, request, client_for, org):
    client = client_for(request.getfixturevalue(role))

    answer = client.post(CREATE, _form())

    assert answer.status_code == 302 and answer["Location"] == PAGE + "#budgets"
    budget = Budget.objects.get(organization=org)
    assert (budget.name, budget.project, budget.period) == ("research", None, "month")
    assert (budget.limit_micros, budget.action) == (250_500_000, "block")
    assert budget.thresholds == [50, 90]
    page = client.get(PAGE).content.decode()
    row = page.split(f'id="budget-row-{budget.public_id}"')[1].split("</tr>")[0]
    assert "$250.50" in row and "block" in row and "50, 90 %" in row and "Edit" in row
    assert "through the API" not in page


def test_a_project_budget_names_its_project(client_for, admin, org, project):
    answer = client_for(admin).post(CREATE, _form(project=project.public_id, name=""))

    assert answer.status_code == 302
    assert Budget.objects.get(organization=org).project == project
    assert "Project Vision" in client_for(admin).get(PAGE).content.decode()


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_members_and_viewers_read_budgets_without_controls(role, request, client_for, org):
    _budget(org, "bud_seen", name="team cap")
    client = client_for(request.getfixturevalue(role))

    page = client.get(PAGE).content.decode()

    assert 'id="budget-row-bud_seen"' in page and "team cap" in page and "$50.00" in page
    assert "budget-new-form" not in page and "/billing/budgets/bud_seen/" not in page
    assert "Admins and owners of Acme set budgets." in page


@pytest.mark.parametrize("role", ["member", "viewer"])
@pytest.mark.parametrize("action", ["create", "edit-page", "edit", "delete"], ids=str)
def test_members_and_viewers_are_refused_every_write(role, action, request, client_for, org):
    budget = _budget(org, "bud_kept")
    client = client_for(request.getfixturevalue(role))
    edit = f"{CREATE}bud_kept/"

    answer = {
        "create": lambda: client.post(CREATE, _form()),
        "edit-page": lambda: client.get(edit),
        "edit": lambda: client.post(edit, _form(limit_usd="1")),
        "delete": lambda: client.post(f"{edit}delete/"),
    }[action]()

    assert answer.status_code == 403
    assert list(Budget.objects.values_list("public_id", "limit_micros")) == [
        ("bud_kept", budget.limit_micros)
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("limit_usd", "0", "The limit must be more than $0."),
        ("limit_usd", "lots", "Enter a number."),
        ("thresholds", "50, 120", "Each threshold is a percent from 1 to 100."),
        ("thresholds", "half", "Thresholds are whole percents"),
        ("period", "decade", "Select a valid choice."),
        ("action", "explode", "Select a valid choice."),
    ],
    ids=["limit-zero", "limit-text", "threshold-over-100", "threshold-text", "period", "action"],
)
def test_bad_input_is_a_400_with_the_error_at_its_field(
    field, value, message, client_for, admin, org
):
    answer = client_for(admin).post(CREATE, _form(**{field: value}))

    assert answer.status_code == 400
    page = answer.content.decode()
    error = page.split(f'id="id_budget_{field}_error"')[1].split("</span>")[0]
    assert message in error
    assert '<details class="budget-new" open>' in page  # the form stays open, filled in
    assert not Budget.objects.filter(organization=org).exists()


def test_the_services_nesting_rule_comes_back_at_the_limit(client_for, admin, org, project):
    _budget(org, "bud_org", limit_micros=100_000_000)  # the organization's month: $100

    answer = client_for(admin).post(CREATE, _form(project=project.public_id, limit_usd="150"))

    assert answer.status_code == 400
    error = answer.content.decode().split('id="id_budget_limit_usd_error"')[1].split("</span>")[0]
    assert "cannot exceed the organization" in error and "$100.00" in error
    assert list(Budget.objects.values_list("public_id", flat=True)) == ["bud_org"]


def test_another_organizations_project_is_not_a_choice(client_for, admin, org, other_project):
    answer = client_for(admin).post(CREATE, _form(project=other_project.public_id))

    assert answer.status_code == 400
    assert "Select a valid choice." in answer.content.decode()
    assert not Budget.objects.exists()


def test_an_admin_edits_a_budget(client_for, admin, org):
    _budget(org, "bud_edit", name="old", thresholds=[50, 80, 100])
    client = client_for(admin)

    form = client.get(f"{CREATE}bud_edit/").content.decode()
    assert 'value="old"' in form and 'value="50"' in form and 'value="50, 80, 100"' in form

    answer = client.post(
        f"{CREATE}bud_edit/", _form(name="new", limit_usd="75", action="terminate", period="week")
    )

    assert answer.status_code == 302
    budget = Budget.objects.get(public_id="bud_edit")
    assert (budget.name, budget.limit_micros, budget.action, budget.period) == (
        "new",
        75_000_000,
        "terminate",
        "week",
    )


def test_a_refused_edit_changes_nothing(client_for, admin, org):
    _budget(org, "bud_same", name="same")

    answer = client_for(admin).post(f"{CREATE}bud_same/", _form(thresholds="0"))

    assert answer.status_code == 400
    assert "Each threshold is a percent from 1 to 100." in answer.content.decode()
    budget = Budget.objects.get(public_id="bud_same")
    assert (budget.name, budget.limit_micros) == ("same", 50_000_000)


def test_an_admin_deletes_a_budget(client_for, admin, org):
    _budget(org, "bud_gone")
    _budget(org, "bud_stays", period=Budget.Period.DAY)

    answer = client_for(admin).post(f"{CREATE}bud_gone/delete/")

    assert answer.status_code == 302
    assert list(Budget.objects.values_list("public_id", flat=True)) == ["bud_stays"]


@pytest.mark.parametrize("action", ["edit-page", "edit", "delete"], ids=str)
def test_another_organizations_budget_is_a_404(action, client_for, admin, other_org):
    theirs = _budget(other_org, "bud_theirs", name="theirs")
    client = client_for(admin)
    edit = f"{CREATE}bud_theirs/"

    answer = {
        "edit-page": lambda: client.get(edit),
        "edit": lambda: client.post(edit, _form(limit_usd="1")),
        "delete": lambda: client.post(f"{edit}delete/"),
    }[action]()

    assert answer.status_code == 404
    theirs.refresh_from_db()
    assert (theirs.name, theirs.limit_micros) == ("theirs", 50_000_000)


def test_the_forms_are_csrf_protected(admin, org):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)

    assert client.post(CREATE, _form()).status_code == 403
    assert not Budget.objects.exists()
