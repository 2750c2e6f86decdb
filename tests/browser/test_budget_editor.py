"""The Billing page's budget editor in real Chromium: an admin opens "New budget", a refused
limit is shown at its field, a good one is listed (and its bar drawn); a member of the same
organization sees the budget with no controls. axe-core finds nothing serious in the open
form with its error."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.accounts.models import Role
from apps.billing.models import Budget
from tests.browser.test_accessibility import blocking_violations, describe
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_an_admin_creates_a_budget_and_a_member_sees_it_without_controls(
    signed_in, team, screenshot
):
    admin = MembershipFactory(organization=team["org"], role=Role.ADMIN, user=UserFactory()).user
    page = signed_in(admin)
    page.goto("/o/studio/billing/")
    budgets = page.locator("#budgets")
    budgets.get_by_text("New budget").click()
    form = page.locator("#budget-new-form")
    form.get_by_label("Name").fill("Speech cap")
    form.get_by_label("Scope").select_option(label="Project Speech")
    form.get_by_label("Period").select_option("week")
    form.get_by_label("Limit (USD)").fill("0")
    form.get_by_label("Action").select_option("block")
    form.get_by_label("Thresholds").fill("75, 90")
    form.get_by_role("button", name="Create budget").click()

    # Refused at its field, the rest of the form kept.
    expect(page.locator("#id_budget_limit_usd_error")).to_have_text(
        "The limit must be more than $0."
    )
    expect(page.locator("#budget-new-form").get_by_label("Name")).to_have_value("Speech cap")
    problems = [describe("budget form", v) for v in blocking_violations(page)]
    assert not problems, "\n".join(problems)
    screenshot(page, "billing-budget-form")
    page.locator("#budget-new-form").get_by_label("Limit (USD)").fill("12.5")
    page.locator("#budget-new-form").get_by_role("button", name="Create budget").click()

    budget = Budget.objects.get(organization=team["org"])
    row = page.locator(f"#budget-row-{budget.public_id}")
    expect(row).to_contain_text("Speech cap")
    expect(row).to_contain_text("Project Speech")
    expect(row).to_contain_text("$12.50")
    expect(row).to_contain_text("block")
    expect(row).to_contain_text("75, 90 %")
    expect(row.get_by_role("button", name="Delete budget Speech cap")).to_be_visible()
    expect(page.locator(f"#budget-{budget.public_id}")).to_contain_text("of $12.50")
    screenshot(page, "billing-budget-listed")

    member_page = signed_in(team["member"])
    member_page.goto("/o/studio/billing/")
    member_row = member_page.locator(f"#budget-row-{budget.public_id}")
    expect(member_row).to_contain_text("Speech cap")
    expect(member_row.get_by_role("button")).to_have_count(0)
    expect(member_row.get_by_role("link")).to_have_count(0)
    expect(member_page.locator("#budget-new-form")).to_have_count(0)
    expect(member_page.locator("#budgets-admin-only")).to_be_visible()
