"""The compare page in real Chromium, against the live stack: two real fine-tunes (the
trainer on the tiny model, run by the stack's worker and runner) that differ only in their
learning rate are picked in the all-jobs list and compared while they train, until both
have succeeded."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.models import Job

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

STEPS = 4


def _finetune(team, tiny_model, demo_data, name: str, learning_rate: float) -> Job:
    config = {
        "model": str(tiny_model),
        "dataset": str(demo_data["alpaca"]),
        "dataset_format": "alpaca",
        "max_samples": None,
        "max_steps": STEPS,
        "learning_rate": learning_rate,
        "seed": 42,
        "save_steps": 10,
    }
    payload = payloads.job_payload(name=name, project_id=team["project"].public_id, config=config)
    return services.job_create(
        organization=team["org"], payload=payload, kind=Job.Kind.FINETUNE
    ).job


def test_two_finetunes_are_compared_curves_drawn_and_only_the_learning_rate_differs(
    signed_in, team, tiny_model, demo_data, screenshot
):
    fast = _finetune(team, tiny_model, demo_data, "lr-3e-3", 0.003)
    slow = _finetune(team, tiny_model, demo_data, "lr-1e-3", 0.001)
    page = signed_in(team["member"])
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto("/o/studio/jobs/")
    expect(page.get_by_role("button", name="Compare")).to_be_disabled()
    page.get_by_label("Pick lr-3e-3 to compare").check()
    page.get_by_label("Pick lr-1e-3 to compare").check()
    expect(page.locator("#compare-count")).to_have_text("2 picked.")
    # A push replaces a row when its job moves on, and its checkbox with it: still ticked.
    row = page.locator(f"#job-row-{fast.public_id}")
    ticked_in = row.get_attribute("data-state")
    assert ticked_in != "succeeded"
    expect(row).not_to_have_attribute("data-state", ticked_in, timeout=120_000)
    expect(page.get_by_label("Pick lr-3e-3 to compare")).to_be_checked()
    expect(page.get_by_label("Pick lr-1e-3 to compare")).to_be_checked()
    page.get_by_role("button", name="Compare").click()

    page.wait_for_url(
        re.compile(rf"/o/studio/jobs/compare/\?ids={fast.public_id},{slow.public_id}$")
    )
    # Followed live (the page polls) until both fine-tunes have trained and ended.
    succeeded = page.locator('#compare-jobs tr[data-state="succeeded"]')
    expect(succeeded).to_have_count(2, timeout=300_000)
    expect(page.locator("#live-indicator")).not_to_have_class(re.compile(r"\bon\b"))

    chart = page.locator("#compare-chart")
    expect(chart).to_have_attribute("data-metric", "loss")
    expect(chart).to_have_attribute("data-series", "2")
    expect(chart).to_have_attribute("data-points", f"{STEPS},{STEPS}")
    expect(chart.locator("canvas")).to_be_visible()
    legend = chart.locator(".u-legend .u-series")
    expect(legend).to_have_count(3)  # the step axis, then one series per job
    expect(legend.nth(1)).to_contain_text("lr-3e-3")
    expect(legend.nth(2)).to_contain_text("lr-1e-3")

    rows = page.locator("#compare-diff tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-key", "training.learning_rate")
    expect(rows.first.locator("td")).to_have_text(["3e-3", "1e-3"])
    expect(page.locator('#compare-metrics tr[data-metric="loss"] [data-best]')).to_have_count(2)
    screenshot(page, "compare-finetunes")

    # Another recorded metric: the same two series, redrawn.
    page.get_by_label("Metric").select_option("learning_rate")
    expect(chart).to_have_attribute("data-metric", "learning_rate")
    expect(chart).to_have_attribute("data-series", "2")
    expect(chart.locator(".u-legend .u-series")).to_have_count(3)
    assert errors == []
