"""The Billing page in real Chromium against the live stack (web, worker, beat; one wall
second bills one minute): the cards and a budget's bar change while a job runs, without a
reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.billing.models import Budget
from apps.billing.selectors import account_summary
from apps.jobs import services

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

GRANTED = "1000000000"  # the team's $1,000 of credits, in micro-dollars
CPU_PRICE = "100000"  # the seeded cpu offer: $0.10 per slot-hour


def test_the_cards_and_a_budget_bar_change_live_while_a_job_runs(signed_in, team, screenshot):
    org = team["org"]
    page = signed_in(team["member"])
    page.goto("/billing/")
    expect(page.get_by_role("heading", name="Billing")).to_be_visible()
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    expect(page.locator("#billing-balance")).to_have_attribute("data-micros", GRANTED)
    expect(page.locator("#billing-burn")).to_have_attribute("data-micros", "0")
    page.evaluate("window.__notReloaded = true")

    services.job_create(
        organization=org,
        payload={
            "name": "burner",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["sleep", "600"]},
        },
    )
    expect(page.locator("#billing-held")).not_to_have_attribute("data-micros", "0")
    expect(page.locator("#billing-burn")).to_have_attribute(
        "data-micros", CPU_PRICE, timeout=30_000
    )
    expect(page.locator("#billing-burn")).to_contain_text("$0.10 / h")
    expect(page.locator("#billing-balance")).not_to_have_attribute(
        "data-micros", GRANTED, timeout=15_000
    )

    # A budget under half spent now, which the running job crosses within seconds.
    spent = account_summary(org.pk).balance_micros
    spent = int(GRANTED) - spent
    Budget.objects.create(
        public_id="bud_browser",
        organization=org,
        name="Browser budget",
        limit_micros=2 * spent + 10_000,
        action=Budget.Action.ALERT,
        thresholds=[50, 80, 100],
    )
    bar = page.locator("#budget-bud_browser")
    expect(bar).to_be_visible(timeout=10_000)  # the next push brings it
    expect(bar).to_have_attribute("data-state", "crossed", timeout=20_000)
    # Past 80 %; on a busy machine the next push may already find it past 100 %.
    expect(bar).to_have_attribute("data-state", re.compile(r"^over-(80|100)$"), timeout=20_000)
    assert bar.locator(".budget-tick.passed").count() >= 2  # rendered with the state
    expect(page.locator("#budget-notices .budget-notice").first).to_be_visible(timeout=10_000)
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "billing-page")
