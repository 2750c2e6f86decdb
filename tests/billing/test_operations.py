"""What operators do with the ledger: grant credits from the command line or the admin,
look at accounts and transfers (read-only), and what `seed_demo` grants the demo."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.billing import ledger
from apps.billing.models import Budget, Transfer
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


def grant(*args: str) -> str:
    out = StringIO()
    call_command("grant_credits", *args, stdout=out)
    return out.getvalue()


def test_grant_credits_credits_the_wallet_and_prints_the_balance(org):
    out = grant("--org", "acme", "--usd", "250.5", "--memo", "conference credits")
    assert "Granted $250.50 to acme." in out
    assert "Balance of acme: $1,250.50 ($1,250.50 available)." in out
    transfer = Transfer.objects.filter(organization=org, code="grant").latest("id")
    assert (transfer.amount_micros, transfer.memo) == (250_500_000, "conference credits")
    assert ledger.balance(org.pk).balance_micros == 1_250_500_000


def test_grant_credits_with_a_key_grants_once(org):
    grant("--org", "acme", "--usd", "10", "--key", "invoice-42")
    again = grant("--org", "acme", "--usd", "10", "--key", "invoice-42")
    assert "was used already" in again
    assert "Balance of acme: $1,010.00" in again
    assert Transfer.objects.filter(idempotency_key="invoice-42").count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--org", "nope", "--usd", "5"], "No organization with slug 'nope'"),
        (["--org", "acme", "--usd", "0"], "--usd must be more than 0"),
        (["--org", "acme", "--usd", "-3"], "--usd must be more than 0"),
        (["--org", "acme", "--usd", "0.0000001"], "--usd must be more than 0"),
        (["--org", "acme", "--usd", "lots"], "--usd must be a number"),
        (["--org", "acme", "--usd", "NaN"], "--usd must be more than 0"),
    ],
)
def test_grant_credits_refuses_an_unknown_org_or_a_non_positive_amount(org, args, message):
    with pytest.raises(CommandError, match=message):
        grant(*args)
    assert Transfer.objects.filter(organization=org).count() == 1  # the factory's grant


@pytest.fixture
def operator(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_admin_lists_accounts_with_dollars_and_transfers(operator, org):
    accounts = operator.get("/admin/billing/account/")
    assert accounts.status_code == 200
    assert "$1,000.00" in accounts.content.decode()
    assert "Grant credits" in accounts.content.decode()
    assert operator.get("/admin/billing/transfer/").status_code == 200
    assert operator.get("/admin/billing/budget/").status_code == 200


def test_the_admin_can_neither_add_change_nor_delete_transfers_or_accounts(operator, org):
    transfer = Transfer.objects.get(organization=org)
    page = operator.get(f"/admin/billing/transfer/{transfer.pk}/change/")
    assert page.status_code == 200  # view only
    assert 'name="_save"' not in page.content.decode()
    changed = operator.post(
        f"/admin/billing/transfer/{transfer.pk}/change/", {"amount_micros": 1, "memo": "x"}
    )
    assert changed.status_code == 403
    deleted = operator.post(f"/admin/billing/transfer/{transfer.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403
    assert operator.get("/admin/billing/transfer/add/").status_code == 403
    account = ledger.accounts_for(org.pk)["wallet"]
    assert operator.post(f"/admin/billing/account/{account.pk}/delete/").status_code == 403
    transfer.refresh_from_db()
    assert (transfer.amount_micros, transfer.memo) == (1_000_000_000, "test credits")


def test_the_admin_grants_credits_once_per_form(operator, org):
    page = operator.get("/admin/billing/account/grant/")
    assert page.status_code == 200
    key = page.context["form"].initial["key"]
    form = {"organization": org.pk, "usd": "12.5", "memo": "sorry", "key": key}
    response = operator.post("/admin/billing/account/grant/", form)
    assert response.status_code == 302
    operator.post("/admin/billing/account/grant/", form)  # submitted twice
    grants = Transfer.objects.filter(organization=org, code="grant", memo="sorry")
    assert [g.amount_micros for g in grants] == [12_500_000]
    assert ledger.balance(org.pk).balance_micros == 1_012_500_000


def test_the_admin_grant_page_refuses_a_zero_amount_and_staff_without_the_permission(
    operator, client, org
):
    form = {"organization": org.pk, "usd": "0", "key": "k"}
    assert operator.post("/admin/billing/account/grant/", form).status_code == 200  # errors
    client.force_login(UserFactory(is_staff=True))
    assert client.get("/admin/billing/account/grant/").status_code == 403
    assert Transfer.objects.filter(organization=org).count() == 1


def test_the_admin_budget_form_keeps_a_project_budget_inside_the_organizations(
    operator, org, project
):
    Budget.objects.create(public_id="bud_org", organization=org, limit_micros=5_000_000)
    form = {
        "organization": org.pk,
        "project": project.pk,
        "name": "vision",
        "period": "month",
        "limit_micros": 6_000_000,
        "action": "alert",
        "thresholds": "[50, 100]",
    }
    refused = operator.post("/admin/billing/budget/add/", form)
    assert refused.status_code == 200
    assert "cannot exceed" in refused.content.decode()
    accepted = operator.post("/admin/billing/budget/add/", {**form, "limit_micros": 5_000_000})
    assert accepted.status_code == 302
    budget = Budget.objects.get(project=project)
    assert budget.public_id.startswith("bud_")


def test_seed_demo_grants_the_demo_organization_credits_once(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    model = tmp_path / "demo" / "tiny-llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")  # built already: not built again here
    out = StringIO()
    call_command("seed_demo", stdout=out)
    call_command("seed_demo", stdout=out)
    assert out.getvalue().count("Demo credits: balance $100.00") == 2
    demo = OrganizationFactory._meta.model.objects.get(slug="demo")
    assert ledger.balance(demo.pk).available_micros == 100_000_000
    assert Transfer.objects.filter(idempotency_key="seed-demo-grant:demo").count() == 1
