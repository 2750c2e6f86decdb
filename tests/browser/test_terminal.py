"""The job page's terminal in real Chromium, end to end: the live stack runs a job on the local
provider, its real runner carries the session (runner/shell.py), and the member types into
xterm.js and reads the answer in the terminal's rendered rows, as they see it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import JobEvent
from tests.browser.test_accessibility import blocking_violations, describe
from tests.integration.conftest import UNTIL_LET_GO
from tests.live import wait_until

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _submit(team, name: str):
    return services.job_create(
        organization=team["org"],
        payload={
            "name": name,
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["bash", "-c", UNTIL_LET_GO]},
        },
    ).job


def test_a_member_types_into_the_jobs_terminal_and_reads_the_answer(signed_in, team, screenshot):
    job = _submit(team, "shell-me")
    page = signed_in(team["member"])
    page.goto(f"/o/studio/jobs/{job.public_id}/")
    # The panel appears when the job starts running, without a reload.
    expect(page.locator('#job-status[data-state="running"]')).to_be_visible(timeout=30_000)
    panel = page.get_by_role("region", name="Connect")
    expect(panel).to_be_visible()
    expect(panel.locator("#ssh-command")).to_have_text(re.compile(rf"ssh -p \d+ {job.public_id}@"))

    page.get_by_role("button", name="Open terminal").click()
    status = page.locator("#terminal-status")
    expect(status).to_have_text("Connected", timeout=30_000)
    page.keyboard.type("echo $((6*7)) $TRAINYARD_JOB_ID")
    page.keyboard.press("Enter")
    rows = page.locator("#terminal .xterm-rows")
    expect(rows).to_contain_text(f"42 {job.public_id}", timeout=15_000)
    screenshot(page, "job-terminal")
    page.keyboard.press("Shift+Tab")  # out of the terminal: no keyboard trap
    expect(page.get_by_role("button", name="Close terminal")).to_be_focused()
    page.locator("#terminal").click()
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        found = blocking_violations(page)
        assert not found, "\n".join(describe(f"terminal ({theme})", v) for v in found)

    # Narrow the window: the terminal fits its box again and the shell hears the new size.
    page.set_viewport_size({"width": 360, "height": 800})
    expect(page.locator("#terminal")).to_have_attribute("data-cols", re.compile(r"^[1-4]\d$"))
    page.keyboard.type("echo size=$(stty size | tr ' ' x)")
    page.keyboard.press("Enter")
    expect(rows).to_contain_text(re.compile(r"size=\d+x[1-4]\d(?!\d)"), timeout=15_000)
    screenshot(page, "job-terminal-narrow")

    # Terminating the job ends the session, and the terminal says why.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Terminate").click()
    expect(status).to_have_text(f"Closed: job {job.public_id} was terminated", timeout=30_000)
    # The session may end before the page's own push of the new state arrives; once it has,
    # the panel's command and button go, and the closed terminal stays with its reason.
    expect(page.locator('#job-status[data-state="terminated"]')).to_be_visible(timeout=30_000)
    expect(page.get_by_role("button", name="Open terminal")).to_be_hidden()
    expect(page.locator("#ssh-command")).to_be_hidden()
    expect(rows).to_contain_text("[closed: ")
    wait_until(
        lambda: JobEvent.objects.filter(job=job, type=JobEventType.SSH_SESSION_CLOSED).exists(),
        15,
        what="the session's closed event",
    )
    opened = JobEvent.objects.get(job=job, type=JobEventType.SSH_SESSION_OPENED)
    assert opened.data["who"] == team["member"].email and opened.data["via"] == "terminal"
