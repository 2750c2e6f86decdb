"""Every page, in real Chromium against the live stack, in the light and the dark theme (by
the emulated `prefers-color-scheme`, and by the top bar's switch remembered over the
system's light): axe-core (vendored, see assets/README.md) finds no serious or critical
violation. A full-page screenshot of each page in each theme goes to var/screenshots/.

The light pass runs every axe rule; the dark passes run the rules about colour. A theme is
a set of colour variables over the same document (its markup, names, roles, order and
labels do not change), so the structural rules would only answer the light pass's answer
again, at a third of this test's CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from apps.jobs import services
from apps.jobs.models import Job
from apps.jobs.states import TERMINAL_STATES
from apps.serving.models import EndpointRequest
from tests.browser.conftest import PASSWORD
from tests.factories import uploaded_dataset
from tests.live import wait_until
from tests.serving.test_endpoint_pages import served_endpoint

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

AXE = Path(__file__).parent / "assets" / "axe-core-4.14.1.min.js"
BLOCKING = ("serious", "critical")
BACKGROUND = {"light": "rgb(246, 247, 249)", "dark": "rgb(16, 20, 27)"}

# Some metrics, a line on stderr, and an exit: a finished job with a curve, events and logs.
TRAINS = """
import json, sys
for step in range(1, 6):
    print(json.dumps({"step": step, "loss": 1 / step}), flush=True)
print("warning: nothing to worry about", file=sys.stderr, flush=True)
"""

# axe's rules that read colours (of text, of links in text), the ones a theme can break.
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
RUN_AXE = """async (rules) => {
  const options = { resultTypes: ["violations"] };
  if (rules) options.runOnly = { type: "rule", values: rules };
  const result = await axe.run(document, options);
  return result.violations.map((v) => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    nodes: v.nodes.length,
    targets: v.nodes.slice(0, 4).map((n) => n.target.join(" ")),
  }));
}"""


def blocking_violations(page: Page, rules: list[str] | None = None) -> list[dict]:
    """axe's serious and critical violations on the page as it stands (of only `rules`
    when given)."""
    page.add_script_tag(path=str(AXE))
    return [v for v in page.evaluate(RUN_AXE, rules) if v["impact"] in BLOCKING]


def describe(where: str, violation: dict) -> str:
    targets = ", ".join(violation["targets"])
    return (
        f"{where}: {violation['id']} ({violation['impact']}, {violation['nodes']} nodes): "
        f"{violation['help']} [{targets}]"
    )


def _pages(team: dict, job: Job, other: Job, endpoint_url: str) -> dict[str, str]:
    org = team["org"].slug
    project = {"org_slug": org, "project_slug": team["project"].slug}
    return {
        "overview": reverse("overview", kwargs={"org_slug": org}),
        "all-jobs": reverse("org-jobs", kwargs={"org_slug": org}),
        "project-jobs": reverse("project-detail", kwargs=project),
        "new-job": reverse("job-new", kwargs=project),
        "job": reverse("job-detail", kwargs={"org_slug": org, "job_id": job.public_id}),
        "compare": reverse("jobs-compare", kwargs={"org_slug": org})
        + f"?ids={job.public_id},{other.public_id}",
        "datasets": reverse("project-datasets", kwargs=project),
        "settings": reverse("org-settings", kwargs={"org_slug": org}),
        "billing": reverse("billing-page", kwargs={"org_slug": org}),
        "endpoints": reverse("endpoint-list", kwargs={"org_slug": org}),
        "endpoint": endpoint_url,
        "playground": reverse("playground", kwargs=project),
    }


def _visit(page: Page, url: str) -> None:
    page.goto(url)
    # Parts some pages fetch once loaded (a quote, the Playground's servers) are in.
    page.wait_for_load_state("networkidle")


def test_every_page_in_both_themes_has_no_serious_accessibility_violation(
    browser, live_stack, team, screenshot
):
    member = team["member"]
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "small-run",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", TRAINS]},
        },
    ).job
    other = services.job_create(
        organization=team["org"],
        payload={
            "name": "smaller-run",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", TRAINS]},
        },
    ).job
    uploaded_dataset(team["project"], name="Greetings")
    served = served_endpoint(team["project"], user=member)
    for latency in (80, 120, 400):
        EndpointRequest.objects.create(
            endpoint=served.endpoint,
            organization=team["org"],
            path="/v1/chat/completions",
            status_code=200,
            latency_ms=latency,
            started_at=served.r2.ready_at,
        )
    pages = _pages(team, job, other, served.url)

    problems: list[str] = []

    def check(page: Page, name: str, theme: str, shot: bool) -> None:
        body = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert body == BACKGROUND[theme], f"{name} in {theme}: body background {body}"
        rules = None if theme == "light" else COLOUR_RULES
        violations = blocking_violations(page, rules)
        problems.extend(describe(f"{name} ({theme})", v) for v in violations)
        if shot:
            screenshot(page, f"{name}-{theme}")

    def one_pass(
        scheme: str, theme: str, choose: Callable[[Page], None] | None, names: tuple[str, ...]
    ) -> None:
        context = browser.new_context(
            base_url=live_stack.url, viewport={"width": 1280, "height": 900}, color_scheme=scheme
        )
        try:
            page = context.new_page()
            _visit(page, "/accounts/login/")
            if choose:
                choose(page)
            check(page, "sign-in", theme, shot=choose is None)
            page.get_by_label("Username").fill(member.username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/accounts/login/" not in url)
            wait_until(
                lambda: (
                    Job.objects.filter(pk__in=(job.pk, other.pk), state__in=TERMINAL_STATES).count()
                    == 2
                ),
                timeout=60,
                what="the jobs to finish",
            )
            for name in names:
                _visit(page, pages[name])
                check(page, name, theme, shot=choose is None)
        finally:
            context.close()

    def choose_dark(page: Page) -> None:
        switch = page.get_by_role("button", name="Theme: System (light)")
        switch.click()
        switch = page.get_by_role("button", name="Theme: Light")
        switch.click()
        expect(page.get_by_role("button", name="Theme: Dark")).to_be_visible()

    every = tuple(pages)
    one_pass("light", "light", None, every)
    one_pass("dark", "dark", None, every)
    # The stored choice over the system's light: the dark pass above checked every page's
    # colours; this one that the choice holds from page to page (a page of each layout).
    one_pass("light", "dark", choose_dark, ("overview", "job", "billing", "playground"))
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert not problems, "serious or critical accessibility violations:\n" + "\n".join(problems)


def test_the_first_tab_stop_is_a_visible_skip_link_to_the_main_content(signed_in, team):
    page = signed_in(team["member"])  # the overview
    missing: list[str] = []
    page.on("response", lambda answer: answer.status == 404 and missing.append(answer.url))
    page.reload()
    page.wait_for_load_state("networkidle")

    page.keyboard.press("Tab")

    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    box = page.locator(".skip-link").bounding_box()
    assert box is not None and box["y"] >= 0  # on screen once focused
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    assert missing == []  # no asset of the page answers 404
