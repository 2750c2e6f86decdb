"""The Playground in real Chromium against the live stack: a completed fine-tune's job page
opens the Playground, whose server is a real serve job running the engine on the local
provider; one prompt goes to the base model and the fine-tune's adapter side by side and
both answers stream in with their figures."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.playground.models import PlaygroundServer
from apps.serving import payloads
from tests.serving.fixtures import finished_finetune

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# The engine loads the tiny model on the CPU: its start, and an adapter's first load, take
# seconds; the whole wait is generous for a loaded CI machine.
READY_MS = 240_000


def test_a_finetune_and_its_base_model_answer_one_prompt_side_by_side(
    signed_in, team, live_stack, settings, tiny_model, tiny_adapters, screenshot
):
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"  # where the stack reads them
    # Run B's adapter: for a chat prompt its greedy answer is visible text (run A's is
    # newlines only), unlike the base model's.
    tuned = finished_finetune(
        project=team["project"],
        tiny_model=tiny_model,
        adapter_dir=tiny_adapters["b"],
        checkpoint_dir=tiny_adapters["a_checkpoint"],
        name="tuned-b",
    )
    adapter_id = f"art_{tuned.adapter.pk}"

    page = signed_in(team["member"])
    # Once its socket opens, the job page catches up and swaps its actions (this link among
    # them) in again: a click while the swap lands finds the link replaced and goes nowhere.
    with page.expect_response(re.compile(rf"/jobs/{tuned.job.public_id}/live/\?")):
        page.goto(f"/o/studio/jobs/{tuned.job.public_id}/")
    page.get_by_role("link", name="Open in Playground").click()
    page.wait_for_url(
        re.compile(rf"/o/studio/projects/speech/playground/\?job={tuned.job.public_id}$")
    )

    page.get_by_label("Pane 1 talks to").select_option("base")
    page.get_by_label("Pane 2 talks to").select_option(adapter_id)
    page.get_by_label("Pane 3 talks to").select_option("")
    page.get_by_label("Temperature").fill("0")
    page.get_by_label("Max tokens").fill("12")
    # Deploying is offered for the adapter's pane only.
    expect(page.locator("#pane-1 .pg-deploy")).to_be_visible()
    expect(page.locator("#pane-0 .pg-deploy")).to_be_hidden()
    screenshot(page, "playground-opened")

    message = page.get_by_label("Message to every pane")
    message.fill("Reverse the letters: a b c")
    message.press("Control+Enter")  # the keyboard sends too

    base, tuned_pane = page.locator("#pane-0"), page.locator("#pane-1")
    expect(base).to_have_attribute("data-status", "done", timeout=READY_MS)
    expect(tuned_pane).to_have_attribute("data-status", "done", timeout=60_000)
    expect(page.locator("#pane-2")).to_have_attribute("data-status", "idle")
    answers = [
        pane.locator(".pg-assistant").last.inner_text().strip() for pane in (base, tuned_pane)
    ]
    assert answers[0] and answers[1]
    assert answers[0] != answers[1]
    for pane in (base, tuned_pane):
        expect(pane.locator('[data-stat="ttft"]')).to_have_text(re.compile(r"^\d+ ms$"))
        expect(pane.locator('[data-stat="tps"]')).to_have_text(re.compile(r"^\d+(\.\d)?$"))
        expect(pane.locator('[data-stat="prompt"]')).to_have_text(re.compile(r"^[1-9]\d*$"))
        expect(pane.locator('[data-stat="completion"]')).to_have_text(re.compile(r"^[1-9]\d*$"))
        expect(pane.locator(".pg-user").last).to_have_text("Reverse the letters: a b c")
    expect(page.locator('#pg-servers li[data-state="ready"]')).to_have_count(1)
    screenshot(page, "playground-answered")

    # One Playground server ran the base model for both panes, on a real serve job.
    server = PlaygroundServer.objects.get(organization=team["org"])
    job = server.job
    assert (job.kind, job.state) == (Job.Kind.SERVE, JobState.RUNNING)
    assert payloads.serves_for(job) == payloads.PLAYGROUND
    assert server.base_model == str(tiny_model)
    assert list(server.adapters.values_list("served_name", flat=True)) == [f"pg-{tuned.adapter.pk}"]
    job_services.job_terminate(job=job)


def test_panes_on_the_demo_model_say_so_and_its_example_fills_the_message(
    signed_in, team, live_stack, settings, tmp_path
):
    """Nothing starts (no message is sent): the notes and the example follow the pane
    choices in the page alone."""
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 4}\n')
    demo = finished_finetune(
        project=team["project"], tiny_model="studio/tiny-llama", adapter_dir=adapter, name="demo"
    )
    page = signed_in(team["member"])
    page.goto(f"/o/studio/projects/speech/playground/?job={demo.job.public_id}")

    notes = [page.locator(f"#pane-{index}-demo") for index in range(3)]
    expect(notes[0]).to_contain_text("Tiny random demo model")
    expect(notes[1]).to_be_visible()
    expect(notes[2]).to_be_hidden()
    page.get_by_label("Pane 3 talks to").select_option(f"art_{demo.adapter.pk}")
    expect(notes[2]).to_be_visible()

    for label in ("Pane 1 talks to", "Pane 2 talks to", "Pane 3 talks to"):
        page.get_by_label(label).select_option("")
    expect(page.locator("#pg-demo-example")).to_be_hidden()
    expect(notes[0]).to_be_hidden()

    page.get_by_label("Pane 1 talks to").select_option("base")
    message = page.get_by_label("Message to every pane")
    message.fill("")
    page.get_by_role("button", name=re.compile("^Example from the demo data")).click()
    expect(message).to_have_value("Reverse the letters.\nc a f")
    expect(message).to_be_focused()
    assert not PlaygroundServer.objects.exists()
