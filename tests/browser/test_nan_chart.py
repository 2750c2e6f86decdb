"""A NaN or infinite loss never breaks the job page: in real Chromium, against the live stack,
the chart draws the finite points with gaps where the others were, the events table shows
the values as text, and no script error is raised, live or on a fresh load."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.jobs import services
from apps.jobs.models import MetricPoint

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Printed while the page watches, so the points arrive through the live feed.
DIVERGING = """
import time
for line in (
    '{"step": 1, "loss": 2.0}',
    '{"step": 2, "loss": NaN}',
    '{"step": 3, "loss": Infinity}',
    "{'loss': -inf, 'epoch': 0.5}",
    '{"step": 5, "loss": 1.0}',
):
    time.sleep(0.4)
    print(line, flush=True)
"""


def _watch_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _expect_chart(page, points: str, gaps: str) -> None:
    chart = page.locator("#loss-chart")
    expect(chart).to_have_attribute("data-points", points)
    expect(chart).to_have_attribute("data-gaps", gaps)
    expect(chart.locator("canvas")).to_be_visible()


def test_non_finite_losses_are_gaps_live_and_on_reload(signed_in, team, screenshot):
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "diverging",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", DIVERGING]},
        },
    ).job
    page = signed_in(team["member"])
    errors = _watch_errors(page)
    page.goto(f"/o/studio/jobs/{job.public_id}/")
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=60_000)
    _expect_chart(page, "5", "3")
    rows = page.locator("#events-body .metric-row")
    expect(rows).to_have_count(5)
    for text in ("NaN", "∞", "-∞"):
        expect(rows.filter(has_text=text).first).to_be_visible()
    expect(page.locator('#job-metrics [data-metric="loss"]')).to_have_text("1")
    screenshot(page, "nan-chart-live")

    page.reload()
    _expect_chart(page, "5", "3")
    expect(page.locator("#events-body .metric-row")).to_have_count(5)
    assert errors == []


def test_a_chart_of_nothing_but_non_finite_losses_still_renders(signed_in, team):
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "all-nan",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["true"]},
        },
    ).job
    for step, loss in ((1, float("nan")), (2, float("inf"))):
        MetricPoint.objects.create(job=job, attempt=1, step=step, loss=loss)
    page = signed_in(team["member"])
    errors = _watch_errors(page)
    page.goto(f"/o/studio/jobs/{job.public_id}/")
    _expect_chart(page, "2", "2")
    expect(page.locator('#job-metrics [data-metric="loss"]')).to_have_text("∞")
    assert errors == []
