"""Acceptance of the live dashboard in real Chromium, against a live server with a real
Celery worker and beat (the stack) and real runner processes."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import transaction
from playwright.sync_api import expect

from apps.jobs import services
from apps.jobs.models import Job
from tests.browser.facts import assert_live_page_matches_a_reload
from tests.jobs.helpers import make_job
from tests.live import wait_until

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

FIVE_LOSSES = """for i in 1 2 3 4 5; do
  echo "{\\"step\\": $i, \\"loss\\": 0.$((10 - i))}"
  sleep 0.4
done
"""


def test_a_submitted_job_is_watched_live_to_success(signed_in, team, screenshot):
    page = signed_in(team["member"])
    page.goto("/o/studio/projects/speech/")
    page.get_by_role("link", name="New job").click()
    screenshot(page, "new-job")
    form = page.locator("#container-form")
    form.get_by_label("Job name").fill("five-losses")
    form.get_by_label("Image").fill("python:3.11-slim")
    form.get_by_label("Script", exact=True).fill(FIVE_LOSSES)
    form.get_by_role("button", name="Submit container job").click()

    page.wait_for_url(re.compile(r"/o/studio/jobs/job_\w+/$"))
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    expect(page.locator('#job-status[data-state="running"]')).to_be_visible(timeout=30_000)
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=60_000)
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "5")
    expect(page.locator('#job-metrics [data-metric="step"]')).to_have_text("5")
    expect(page.locator("#events-body .metric-row")).to_have_count(5)
    expect(page.locator("#events-body .event-row", has_text="workload_exited")).to_have_count(1)
    expect(page.locator("#log-lines .log-line.src-user")).to_have_count(5)
    assert page.evaluate("window.__notReloaded") is True
    facts = assert_live_page_matches_a_reload(page)
    assert facts["provider"] == "local" and facts["ended"] != "—"
    assert re.fullmatch(r"\d+s|\d+m \d\ds", facts["duration"]), facts["duration"]
    screenshot(page, "job-succeeded")

    page.goto("/o/studio/projects/speech/")
    expect(page.locator("#job-list-body tr", has_text="five-losses")).to_contain_text("Succeeded")
    screenshot(page, "job-list")


def test_cancelling_a_running_job_shows_terminated_live(signed_in, team):
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "sleepy",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["sleep", "600"]},
        },
    ).job
    page = signed_in(team["member"])
    page.goto(f"/o/studio/jobs/{job.public_id}/")
    expect(page.locator('#job-status[data-state="running"]')).to_be_visible(timeout=30_000)
    # Screen readers hear the status change: it sits in a polite live region.
    expect(page.locator('[role="status"][aria-live="polite"] #job-status')).to_have_count(1)
    # A running job's duration moves on its own, as a reload a moment later would show it.
    duration = page.locator('[data-fact="duration"]')
    expect(duration.locator("[data-elapsed-s]")).to_have_count(1)
    shown = duration.inner_text()
    expect(duration).not_to_have_text(shown, timeout=5_000)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Terminate").click()
    expect(page.locator('#job-status[data-state="terminated"]')).to_be_visible(timeout=30_000)
    expect(page.locator("#job-status")).to_contain_text("Terminated by a user.")
    expect(page.get_by_role("button", name="Terminate")).to_be_hidden()
    expect(duration.locator("[data-elapsed-s]")).to_have_count(0)  # ended: it stops
    assert Job.objects.get(pk=job.pk).state == "terminated"


def test_what_changed_before_the_socket_first_opened_shows_without_a_reload(signed_in, team):
    """A push sent between the page's render and its socket joining reaches nobody; the page
    asks for what it missed when the socket opens, the first time as after a reconnect."""
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "early-end",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["sleep", "600"]},
        },
    ).job
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "running", 30, what="running")
    page = signed_in(team["member"])
    held = []  # the websocket extension's script, held back: no socket until it is let go
    page.route("**/htmx-ext-ws-*.js", lambda route: held.append(route))
    page.goto(f"/o/studio/jobs/{job.public_id}/", wait_until="commit")
    while not held:
        page.wait_for_timeout(20)
    expect(page.locator('#job-status[data-state="running"]')).to_be_attached()

    _off_the_browsers_thread(lambda: services.job_terminate(job=Job.objects.get(pk=job.pk)))
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "terminated", 30, what="the end")
    held[0].continue_()

    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    expect(page.locator('#job-status[data-state="terminated"]')).to_be_visible(timeout=10_000)
    expect(page.get_by_role("button", name="Terminate")).to_be_hidden()


def _off_the_browsers_thread(call) -> None:
    """Run `call` in a thread of its own: Playwright's event loop runs in this one, and a
    service's live push (async_to_sync) refuses to run beside it."""
    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=30)


def test_another_orgs_member_gets_404_and_a_refused_socket(signed_in, team, stack):
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "private",
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["true"]},
        },
    ).job
    page = signed_in(team["outsider"])
    response = page.goto(f"/o/studio/jobs/{job.public_id}/")
    assert response.status == 404
    response = page.goto(f"/o/rivals/jobs/{job.public_id}/")
    assert response.status == 404
    code = page.evaluate(
        """(path) => new Promise((resolve) => {
             const socket = new WebSocket(`ws://${location.host}${path}`);
             socket.onmessage = () => resolve("got data");
             socket.onclose = (event) => resolve(event.code);
           })""",
        f"/ws/jobs/{job.public_id}/",
    )
    assert code == 4403


def test_form_errors_show_next_to_their_fields(signed_in, team):
    page = signed_in(team["member"])
    page.goto("/o/studio/projects/speech/jobs/new/")
    form = page.locator("#container-form")
    form.get_by_label("Job name").fill("bad")
    form.get_by_label("Image").fill("img")
    form.get_by_label("Script (base64)").fill("%%% not base64")
    form.get_by_role("button", name="Submit container job").click()
    # Each error stands right by its own field.
    expect(page.locator("#container-script_b64_error")).to_contain_text("Not valid base64.")
    assert "/jobs/new/" in page.url

    form = page.locator("#container-form")
    form.get_by_label("Script (base64)").fill("")
    form.get_by_label("Command").fill("echo hi")
    form.get_by_label("Accelerator").select_option("nvidia-l40s-48gb")
    form.get_by_label("Count", exact=True).select_option("3")
    form.get_by_role("button", name="Submit container job").click()
    expect(page.locator("#container-gpu_count_error")).to_contain_text(
        "comes in gpu counts 1, 2, 4, 8"
    )
    expect(page.locator("#container-script_b64_error")).to_have_count(0)
    assert not Job.objects.filter(organization=team["org"]).exists()


def test_a_finetune_from_the_form_shows_its_curve_checkpoints_and_adapter(
    signed_in, team, tiny_model, demo_data, screenshot
):
    page = signed_in(team["member"])
    page.goto("/o/studio/projects/speech/jobs/new/")
    form = page.locator("#finetune-form")
    form.get_by_label("Job name").fill("tiny-lora")
    form.get_by_label("Model").fill(str(tiny_model))
    form.get_by_label("Dataset", exact=True).fill(str(demo_data["chatml"]))
    form.get_by_label("Dataset format").select_option("chatml")
    form.get_by_label("Max steps").fill("20")
    form.get_by_label("Learning rate").fill("0.003")
    form.get_by_role("button", name="Start fine-tune").click()

    page.wait_for_url(re.compile(r"/o/studio/jobs/job_\w+/$"))
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=300_000)
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "20")
    expect(page.locator("#job-artifacts")).to_contain_text("final adapter")
    expect(page.locator("#job-artifacts tr", has_text="checkpoint")).to_have_count(2)
    expect(page.locator("#job-artifacts")).to_contain_text("Self-grading passed")
    facts = assert_live_page_matches_a_reload(page)
    assert facts["learning-rate"] == "3e-3"  # not 0.003000000000000001
    screenshot(page, "finetune-succeeded")


# Attempt 1 logs six steps and waits; attempt 2 (no checkpoint: it starts over) logs four.
STARTS_OVER = """
import json, os, time
attempt = os.environ["TRAINYARD_ATTEMPT"]
for step in range(1, 7 if attempt == "1" else 5):
    print(json.dumps({"type": "metrics", "step": step, "loss": 1 / step}), flush=True)
    time.sleep(0.2)
if attempt == "1":
    time.sleep(600)
"""

URGENT_HOLDS_THE_SLOT = "import time; print('urgent', flush=True); time.sleep(4)"


def test_a_displaced_job_is_watched_through_preemption_and_restart(
    signed_in, team, solo, screenshot
):
    compute = {"accelerator": solo, "gpu_count": 1, "ephemeral_disk_gb": 1}
    victim = services.job_create(
        organization=team["org"],
        payload={
            "name": "spot-run",
            "project": team["project"].public_id,
            "priority_class": "preemptible",
            "compute": compute,
            "container": {"image": "local", "command": ["python", "-c", STARTS_OVER]},
        },
    ).job
    page = signed_in(team["member"])
    page.goto(f"/o/studio/jobs/{victim.public_id}/")
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "6", timeout=60_000)
    standard = services.job_create(
        organization=team["org"],
        payload={
            "name": "urgent",
            "project": team["project"].public_id,
            "compute": compute,
            # It holds the slot a few seconds: a freed slot places the victim again at once,
            # and the page must get the chance to show it waiting as `preempted`.
            "container": {"image": "local", "command": ["python", "-c", URGENT_HOLDS_THE_SLOT]},
        },
    ).job

    expect(page.locator('#job-status[data-state="preempted"]')).to_be_visible(timeout=60_000)
    expect(page.locator("#job-attempts")).to_contain_text(f"preempted by {standard.public_id}")
    screenshot(page, "job-preempted")
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=60_000)
    # It started over: steps 5 and 6 of the first attempt are gone from the curve, and a
    # dashed line marks the restart at step 0.
    expect(page.locator("#loss-chart")).to_have_attribute("data-resumes", "0")
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "4")
    expect(page.locator("#job-attempts tbody tr")).to_have_count(2)
    expect(
        page.locator("#events-body .event-row", has_text="restarted_from_beginning")
    ).to_have_count(1)
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "job-restarted")


def test_picking_an_uploaded_dataset_sets_the_format(signed_in, team):
    from tests.factories import uploaded_dataset

    dataset = uploaded_dataset(
        team["project"],
        name="Chats",
        dataset_format="chatml",
        rows=[
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ]
            }
        ],
    )
    page = signed_in(team["member"])
    page.goto("/o/studio/projects/speech/jobs/new/")
    form = page.locator("#finetune-form")
    form.get_by_label("Dataset format").select_option("alpaca")
    form.get_by_label("Dataset", exact=True).fill(dataset.public_id)
    expect(form.get_by_label("Dataset format")).to_have_value("chatml")


def test_edit_and_run_opens_the_form_filled_in_and_links_the_new_job(signed_in, team):
    with transaction.atomic():  # dispatch runs after the commit and finds it ended
        original = make_job(
            team["org"],
            state="failed",
            name="first-try",
            project=team["project"].public_id,
            container={"image": "python:3.11-slim", "command": ["sh", "-c", "exit 1"]},
        )
    page = signed_in(team["member"])
    page.goto(f"/o/studio/jobs/{original.public_id}/")
    page.get_by_role("link", name="Edit and run").click()

    form = page.locator("#container-form")
    expect(page.locator("#rerun-notice")).to_contain_text("Editing a copy of first-try")
    expect(form.get_by_label("Job name")).to_have_value("first-try")
    expect(form.get_by_label("Command")).to_have_value("sh -c 'exit 1'")
    form.get_by_label("Command").fill("sh -c 'exit 0'")
    form.get_by_role("button", name="Submit container job").click()

    # The browser keeps the New Job page's `#container` through the redirect.
    page.wait_for_url(re.compile(r"/o/studio/jobs/job_\w+/(#container)?$"))
    expect(page.locator("#job-lineage")).to_contain_text(
        f"Re-run of first-try ({original.public_id})"
    )
    new = Job.objects.get(rerun_of=original)
    assert f"/jobs/{new.public_id}/" in page.url
    assert new.spec["container"]["command"] == ["sh", "-c", "exit 0"]
