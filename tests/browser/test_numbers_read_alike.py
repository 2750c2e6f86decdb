"""Numbers read alike everywhere, in real Chromium against the live stack: the browser's
formatters follow the table the server and the CLI follow (tests/formats_table.py), and
for one finished job the same money and the same loss read identically on the job page
(card and chart legend), the Billing page (chart legend and axis) and in `trainyard jobs
get` / `trainyard metrics`."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from apps.accounts import services as account_services
from apps.billing.models import Transfer
from apps.core.money import format_usd, format_usd_full
from apps.core.template_filters import sig, usd
from apps.jobs import services
from apps.jobs.models import Job
from apps.jobs.states import JobState
from tests.formats_table import MEASUREMENTS, MONEY
from tests.integration.stack import wait_for
from trainyard_cli.main import run

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Two losses with more digits than anyone reads, then a few billed (fast-clock) minutes.
TRAINING = """
import time
print('{"step": 1, "loss": 7.60291}', flush=True)
print('{"step": 2, "loss": 6.008123}', flush=True)
time.sleep(3)
"""
LOSS = sig(6.008123)  # "6.008"


def _finished_job(team) -> Job:
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "digits",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", TRAINING]},
        },
    ).job

    def billed() -> bool:
        job.refresh_from_db()
        posted = Transfer.objects.filter(job=job, code="usage").values_list(
            "amount_micros", flat=True
        )
        return (
            job.state == JobState.SUCCEEDED
            and job.accrued_micros > 0
            and sum(posted) == job.accrued_micros
        )

    wait_for(billed, 90, "the job succeeded and every minute posted")
    return job


def _cli(argv: list[str], live_stack, key: str, monkeypatch, capsys) -> str:
    monkeypatch.setenv("TRAINYARD_URL", live_stack.url)
    monkeypatch.setenv("TRAINYARD_API_KEY", key)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert run(argv) == 0
    return capsys.readouterr().out


def test_money_and_loss_read_alike_on_pages_charts_and_the_cli(
    signed_in, team, live_stack, monkeypatch, capsys, tmp_path, screenshot
):
    page = signed_in(team["member"])
    shown = page.evaluate(
        "([money, values]) => [money.map((m) => window.trainyardFormat.usdMicros(m)),"
        " values.map((v) => window.trainyardFormat.sig(v))]",
        [[m for m, _ in MONEY], [v for v, _ in MEASUREMENTS]],
    )
    assert shown == [[s for _, s in MONEY], [s for _, s in MEASUREMENTS]]

    job = _finished_job(team)
    money = format_usd(job.accrued_micros)
    assert money.startswith("$0.0")  # a few minutes at $0.10/h: below a cent, to a tenth

    page.goto(f"/o/studio/jobs/{job.public_id}/")
    expect(page.locator('[data-fact="cost"]')).to_have_text(money)
    assert page.locator('[data-fact="cost"]').inner_html() == str(usd(job.accrued_micros))
    expect(page.locator('#job-metrics [data-metric="loss"]')).to_have_text(LOSS)
    legend = page.locator("#loss-chart .u-legend .u-series .u-value")
    expect(legend).to_have_text(["2", LOSS])  # the last point, with no cursor over the chart
    screenshot(page, "numbers-job-page")

    page.goto("/billing/")
    chart = page.locator("#spend-chart")
    expect(
        chart.locator(".u-legend .u-series", has_text="Speech").locator(".u-value")
    ).to_have_text(money)
    ticks = json.loads(chart.get_attribute("data-ticks"))
    assert len(ticks) >= 2
    for value, label in ticks:  # the money formatter's text, and nothing rounded away
        assert label == format_usd(round(value * 1_000_000)), ticks
        assert label == format_usd_full(round(value * 1_000_000)), ticks
    screenshot(page, "numbers-billing-page")

    monkeypatch.setenv("HOME", str(tmp_path))
    _, key = account_services.api_key_create(organization=team["org"], name="numbers")
    got = _cli(["jobs", "get", job.public_id], live_stack, key, monkeypatch, capsys)
    rows = [line.split() for line in got.splitlines()]
    assert ["accrued", money] in rows, got
    assert ["metric", "loss", LOSS] in rows, got
    metrics = _cli(["metrics", job.public_id], live_stack, key, monkeypatch, capsys)
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in metrics.splitlines()]
    assert ["loss", LOSS, "2"] in [row[:3] for row in cells], metrics
