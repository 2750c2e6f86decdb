"""A newcomer's first hour on a podman host, in real Chromium: the New Job page's prefilled
fine-tune (the demo model and data `seed_demo` publishes to the hub) runs in the trainer
image the offline builder made, its adapter is published back to the hub, and the
Playground answers from it with an engine in the engine image."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.finetunes.demo import publish_demo_assets
from apps.jobs import services as job_services
from apps.jobs.models import Attempt
from apps.playground.models import PlaygroundServer
from apps.providers import images
from apps.providers.models import Provider

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

READY_MS = 300_000


def test_the_prefilled_demo_finetune_runs_in_the_image_and_answers_in_the_playground(
    signed_in, team, live_stack, settings, tiny_model, demo_data, trainer_image, screenshot
):
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"  # the stack's storage
    publish_demo_assets(team["org"], tiny_model, demo_data)  # what seed_demo does for `demo`

    page = signed_in(team["member"])
    page.goto("/o/studio/projects/speech/jobs/new/")
    form = page.locator("#finetune-form")
    expect(form.get_by_label("Model")).to_have_value("studio/tiny-llama")
    expect(form.get_by_label("Dataset", exact=True)).to_have_value("studio/demo-alpaca")
    form.get_by_label("Max steps").fill("8")
    form.get_by_role("button", name="Start fine-tune").click()

    page.wait_for_url(re.compile(r"/o/studio/jobs/job_\w+/$"))
    job_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=READY_MS)
    published = page.locator("#job-artifacts .published")
    expect(published).to_contain_text("Published to the hub as", timeout=60_000)
    expect(published.get_by_role("link")).to_have_text("studio/demo-finetune")
    attempt = Attempt.objects.get(job__public_id=job_id)
    assert (attempt.handle["runtime"], attempt.handle["image"]) == ("podman", trainer_image)
    screenshot(page, "first-hour-finetune")

    # The outputs panel follows the job live: its final adapter's Chat link.
    final = page.locator("#job-artifacts tr", has_text="final adapter")
    final.get_by_role("link", name="Chat").click()
    page.wait_for_url(re.compile(r"/playground/\?artifact=art_\d+$"))
    expect(page.locator("#pg-demo-note")).to_contain_text("tiny and random")
    message = page.get_by_label("Message to every pane")
    expect(message).to_have_value("Reverse the letters.\nc a f")  # from the demo data
    page.get_by_label("Pane 1 talks to").select_option("")
    page.get_by_label("Temperature").fill("0")
    page.get_by_label("Max tokens").fill("8")
    page.get_by_role("button", name="Send").click()

    pane = page.locator("#pane-1")
    expect(pane).to_have_attribute("data-status", "done", timeout=READY_MS)
    expect(pane.locator('[data-stat="completion"]')).to_have_text(re.compile(r"^[1-9]\d*$"))
    screenshot(page, "first-hour-playground")

    server = PlaygroundServer.objects.get(organization=team["org"])
    engine_attempt = Attempt.objects.filter(job=server.job).latest("number")
    assert engine_attempt.handle["image"] == images.engine_image()
    job_services.job_terminate(job=server.job)
