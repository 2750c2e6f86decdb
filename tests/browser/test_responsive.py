"""The pages on a phone and beside a wide dataset, in real Chromium against the live stack:
at 360 by 740 px no page scrolls sideways, the top navigation stays reachable by keyboard and a
state badge never breaks mid-word; axe-core finds no serious violation at 360 px on a page of
each layout in both themes (test_accessibility.py checks every page at 1280 px); a dataset
with long rows scrolls inside its preview box instead of widening the page at 1280 px."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from apps.jobs import services
from apps.jobs.models import Job
from apps.jobs.states import TERMINAL_STATES
from tests.browser.conftest import PASSWORD
from tests.browser.test_accessibility import (
    COLOUR_RULES,
    TRAINS,
    _pages,
    _visit,
    blocking_violations,
    describe,
)
from tests.factories import uploaded_dataset
from tests.live import wait_until
from tests.serving.test_endpoint_pages import served_endpoint

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PHONE = {"width": 360, "height": 740}
# A page of each layout: a list, a form, the job page, the endpoint page, the Playground.
AXE_AT_360 = ("all-jobs", "new-job", "job", "endpoint", "settings", "playground")
# One unbreakable 600-character word: the widest thing a preview may hold.
LONG_ROW = {"instruction": "Repeat " + "x" * 600, "output": "y" * 600}

WIDTH = "[document.documentElement.scrollWidth, window.innerWidth]"
# Each state badge's height over its font size: one line is about 1.5, a wrapped one over 2.5.
BADGE_LINES = """() => [...document.querySelectorAll('.badge')].map((b) => ({
  text: b.textContent.trim(),
  ratio: b.getBoundingClientRect().height / parseFloat(getComputedStyle(b).fontSize),
}))"""


def _job(team: dict, name: str) -> Job:
    return services.job_create(
        organization=team["org"],
        payload={
            "name": name,
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", TRAINS]},
        },
    ).job


def _sign_in(page: Page, user) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def test_at_360_px_no_page_scrolls_sideways_and_the_nav_works_by_keyboard(
    browser, live_stack, team, screenshot, settings
):
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"  # where the stack reads it
    job, other = _job(team, "small-run"), _job(team, "smaller-run")
    wide = uploaded_dataset(team["project"], name="Wide", rows=[LONG_ROW, LONG_ROW])
    served = served_endpoint(team["project"], user=team["member"])
    pages = _pages(team, job, other, served.url)
    org = team["org"].slug
    project = {"org_slug": org, "project_slug": team["project"].slug}
    pages.update(
        {
            "dataset": reverse("project-dataset", kwargs={**project, "dataset_id": wide.public_id}),
            "projects": reverse("project-list", kwargs={"org_slug": org}),
            "new-project": reverse("project-create", kwargs={"org_slug": org}),
            "models": reverse("hub-list", kwargs={"org_slug": org, "section": "models"}),
            "hub-datasets": reverse("hub-list", kwargs={"org_slug": org, "section": "datasets"}),
            "sweeps": reverse("project-sweeps", kwargs=project),
            "new-sweep": reverse("sweep-new", kwargs=project),
            "webhooks": reverse("org-webhooks", kwargs={"org_slug": org}),
            "serve-job": reverse(
                "job-detail", kwargs={"org_slug": org, "job_id": served.endpoint.job.public_id}
            ),
        }
    )
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=(job.pk, other.pk), state__in=TERMINAL_STATES).count() == 2
        ),
        timeout=60,
        what="the jobs to finish",
    )

    too_wide: list[str] = []
    wrapped: list[str] = []
    problems: list[str] = []
    for scheme in ("light", "dark"):
        context = browser.new_context(base_url=live_stack.url, viewport=PHONE, color_scheme=scheme)
        try:
            page = context.new_page()
            _visit(page, "/accounts/login/")
            if scheme == "light":
                scroll, inner = page.evaluate(WIDTH)
                if scroll > inner:
                    too_wide.append(f"sign-in: {scroll} px")
            _sign_in(page, team["member"])
            for name, url in pages.items():
                if scheme == "dark" and name not in AXE_AT_360:
                    continue
                _visit(page, url)
                if scheme == "light":
                    scroll, inner = page.evaluate(WIDTH)
                    if scroll > inner:
                        too_wide.append(f"{name}: {scroll} px in a {inner} px window")
                    wrapped.extend(
                        f"{name}: {b['text']!r}"
                        for b in page.evaluate(BADGE_LINES)
                        if b["ratio"] > 2.2
                    )
                    screenshot(page, f"{name}-360")
                if name in AXE_AT_360:
                    # The dark pass checks colours only (test_accessibility's docstring).
                    rules = None if scheme == "light" else COLOUR_RULES
                    problems.extend(
                        describe(f"{name} ({scheme}, 360 px)", v)
                        for v in blocking_violations(page, rules)
                    )

            # The nav: every link on screen, and reachable with Tab from the top of the page.
            links = page.get_by_role("navigation", name="Main").get_by_role("link")
            expect(links).to_have_count(8)
            for link in links.all():
                box = link.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 360
            page.keyboard.press("Tab")  # the skip link
            for _ in range(12):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.textContent.trim()") == "Billing":
                    break
            page.keyboard.press("Enter")
            expect(page).to_have_url(live_stack.url + pages["billing"])
        finally:
            context.close()

    assert too_wide == [], "pages wider than the phone:\n" + "\n".join(too_wide)
    assert wrapped == [], "badges broken over two lines:\n" + "\n".join(wrapped)
    assert problems == [], "serious or critical violations at 360 px:\n" + "\n".join(problems)


def test_a_wide_dataset_scrolls_inside_its_preview_not_the_page(
    signed_in, live_stack, team, settings
):
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"  # where the stack reads it
    wide = uploaded_dataset(team["project"], name="Wide", rows=[LONG_ROW])
    page = signed_in(team["member"])
    page.goto(
        reverse(
            "project-dataset",
            kwargs={
                "org_slug": team["org"].slug,
                "project_slug": team["project"].slug,
                "dataset_id": wide.public_id,
            },
        )
    )

    scroll, inner = page.evaluate(WIDTH)
    assert scroll <= inner == 1280
    preview = page.locator("#dataset-preview-box")
    assert preview.evaluate("box => box.scrollWidth > box.clientWidth")  # scrolls on its own
    assert preview.evaluate("box => box.getBoundingClientRect().right") <= 1280
    expect(preview).to_contain_text("x" * 600)


def test_between_phone_and_desktop_the_top_bar_wraps_instead_of_widening_the_page(signed_in, team):
    page = signed_in(team["member"])  # the overview, at 1280 px the bar is one row
    one_row = page.locator(".topbar").bounding_box()["height"]

    for width in (1024, 800):
        page.set_viewport_size({"width": width, "height": 800})
        scroll, inner = page.evaluate(WIDTH)
        assert scroll <= inner == width
        assert page.locator(".topbar").bounding_box()["height"] > one_row  # links on a row
        expect(page.get_by_role("navigation", name="Main").get_by_role("link")).to_have_count(8)
