"""The overview and the all-jobs list in real Chromium, against the live stack."""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

from apps.jobs import services
from tests.factories import ProjectFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _submit(team, name, command, *, accelerator="cpu", project=None):
    return services.job_create(
        organization=team["org"],
        payload={
            "name": name,
            "project": (project or team["project"]).public_id,
            "compute": {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": command},
        },
        created_by=team["member"],
    ).job


def test_the_overview_follows_a_job_from_waiting_to_running_to_failed(
    signed_in, team, solo, screenshot
):
    page = signed_in(team["member"])  # signing in lands on the overview
    expect(page.locator("#overview-live")).to_contain_text("No jobs yet")
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)

    blocker = _submit(team, "blocker", ["sleep", "600"], accelerator=solo)
    running = page.locator(f'#overview-running tr[data-job="{blocker.public_id}"]')
    expect(running).to_be_visible(timeout=30_000)
    flaky = _submit(team, "flaky", ["bash", "-c", "sleep 1; exit 3"], accelerator=solo)
    waiting = page.locator(f'#overview-queued tr[data-job="{flaky.public_id}"]')
    expect(waiting).to_contain_text("No capacity", timeout=30_000)
    screenshot(page, "overview-waiting")

    services.job_terminate(job=blocker)  # its slot frees: the waiting job runs, then fails
    expect(page.locator(f'#overview-running tr[data-job="{flaky.public_id}"]')).to_be_visible(
        timeout=30_000
    )
    failed = page.locator(f'#overview-failures tr[data-job="{flaky.public_id}"]')
    expect(failed).to_contain_text("The workload exited with code 3.", timeout=30_000)
    expect(page.locator(f'#overview-running tr[data-job="{blocker.public_id}"]')).to_have_count(0)
    expect(page.locator('[data-overview="running-count"]')).to_have_text("0")
    screenshot(page, "overview-failed")


def test_the_all_jobs_list_filters_by_project_and_text_and_its_url_round_trips(
    signed_in, team, screenshot
):
    audio = ProjectFactory(organization=team["org"], name="Audio", slug="audio")
    speech_sweep = _submit(team, "speech-sweep", ["true"])
    _submit(team, "speech-eval", ["true"])
    audio_sweep = _submit(team, "audio-sweep", ["true"], project=audio)
    page = signed_in(team["member"])
    page.goto("/o/studio/jobs/")
    expect(page.locator("#job-list-body tr[data-state]")).to_have_count(3)

    page.get_by_label("Project").select_option("speech")
    page.get_by_label("Name").fill("sweep")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/o/studio/jobs/\?"))
    rows = page.locator("#job-list-body tr[data-state]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("speech-sweep")
    query = parse_qs(urlparse(page.url).query)
    assert query["project"] == ["speech"] and query["q"] == ["sweep"]
    screenshot(page, "all-jobs-filtered")

    shared = page.context.new_page()  # the URL is the view: open it as a colleague would
    shared.goto(page.url)
    expect(shared.get_by_label("Project")).to_have_value("speech")
    expect(shared.get_by_label("Name")).to_have_value("sweep")
    expect(shared.locator("#job-list-body tr[data-state]")).to_have_count(1)
    expect(shared.locator(f"#job-row-{speech_sweep.public_id}")).to_be_visible()
    expect(shared.locator("#live-indicator.on")).to_be_visible(timeout=10_000)

    # Live rows respect the view's filters: a new matching job appears, another does not.
    fresh = _submit(team, "speech-sweep-2", ["true"])
    _submit(team, "audio-sweep-2", ["true"], project=audio)
    expect(shared.locator(f"#job-row-{fresh.public_id}")).to_be_visible(timeout=30_000)
    expect(shared.locator("#job-list-body tr[data-state]")).to_have_count(2)
    expect(shared.locator(f"#job-row-{audio_sweep.public_id}")).to_have_count(0)
    shared.close()


def test_times_read_in_the_browsers_time_zone_with_utc_on_hover(signed_in, team):
    job = _submit(team, "tokyo-run", ["true"])
    page = signed_in(team["member"], timezone_id="Asia/Tokyo")
    page.goto("/o/studio/jobs/")
    created = page.locator(f"#job-row-{job.public_id} time")
    utc = job.created_at.astimezone(UTC)
    tokyo = utc + timedelta(hours=9)  # Japan keeps no daylight saving time
    expect(created).to_have_text(tokyo.strftime("%Y-%m-%d %H:%M:%S"))
    expect(created).to_have_attribute("title", utc.strftime("%Y-%m-%d %H:%M:%S UTC"))
