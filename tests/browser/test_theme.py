"""The colour theme and keyboard focus in real Chromium against the live stack: the top bar's
switch cycles system, light and dark and is remembered across a reload; with no choice the
page follows the system's `prefers-color-scheme`, live; the job page's loss chart is redrawn
in the theme's colours; every top-bar control is reached with Tab and shows its focus."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from apps.jobs import services
from tests.browser.conftest import PASSWORD

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LIGHT = "rgb(246, 247, 249)"
DARK = "rgb(16, 20, 27)"
BODY_BACKGROUND = "getComputedStyle(document.body).backgroundColor"

# Pixels of the canvas drawn in exactly the theme's --chart-line colour: the loss curve.
LINE_PIXELS = """() => {
  const hex = getComputedStyle(document.documentElement).getPropertyValue("--chart-line").trim();
  const rgb = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const canvas = document.querySelector("#loss-chart canvas");
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const count = (r, g, b) => {
    let n = 0;
    for (let i = 0; i < pixels.length; i += 4) {
      const [pr, pg, pb, pa] = pixels.subarray(i, i + 4);
      if (pr === r && pg === g && pb === b && pa === 255) n++;
    }
    return n;
  };
  const light = count(0x24, 0x56, 0xd6);
  const dark = count(0x8d, 0xb0, 0xff);
  return { hex, count: count(...rgb), light, dark };
}"""


@pytest.fixture
def new_page(browser, live_stack):
    """A function: a page in a fresh context with the given system colour scheme."""
    contexts = []

    def make(scheme: str = "light") -> Page:
        context = browser.new_context(
            base_url=live_stack.url, viewport={"width": 1280, "height": 900}, color_scheme=scheme
        )
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def _sign_in(page: Page, user) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def _expect_background(page: Page, colour: str) -> None:
    page.wait_for_function(f"{BODY_BACKGROUND} === {colour!r}")


def test_the_switch_cycles_the_theme_and_remembers_it_across_a_reload(new_page):
    page = new_page("light")
    page.goto("/accounts/login/")
    _expect_background(page, LIGHT)
    page.get_by_role("button", name="Theme: System (light)").click()
    page.get_by_role("button", name="Theme: Light").click()
    expect(page.get_by_role("button", name="Theme: Dark")).to_be_focused()
    _expect_background(page, DARK)
    assert page.evaluate("localStorage.getItem('trainyard-theme')") == "dark"

    page.reload()
    expect(page.get_by_role("button", name="Theme: Dark")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    _expect_background(page, DARK)

    page.get_by_role("button", name="Theme: Dark").click()  # back to the system's
    expect(page.get_by_role("button", name="Theme: System (light)")).to_be_visible()
    _expect_background(page, LIGHT)
    page.reload()
    assert page.evaluate("document.documentElement.hasAttribute('data-theme')") is False
    _expect_background(page, LIGHT)


def test_with_no_choice_the_page_follows_the_system_scheme_live(new_page):
    page = new_page("dark")
    page.goto("/accounts/login/")
    _expect_background(page, DARK)
    expect(page.get_by_role("button", name="Theme: System (dark)")).to_be_visible()
    page.emulate_media(color_scheme="light")
    _expect_background(page, LIGHT)
    expect(page.get_by_role("button", name="Theme: System (light)")).to_be_visible()
    # A stored choice wins over the system's scheme.
    page.get_by_role("button", name="Theme: System (light)").click()
    page.emulate_media(color_scheme="dark")
    expect(page.get_by_role("button", name="Theme: Light")).to_be_visible()
    _expect_background(page, LIGHT)


def test_switching_the_theme_redraws_the_loss_chart_in_its_colours(new_page, team):
    job = services.job_create(
        organization=team["org"],
        payload={
            "name": "curve",
            "project": team["project"].public_id,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {
                "image": "local",
                "command": [
                    "python",
                    "-c",
                    'for s in range(1, 9): print(\'{"step": %d, "loss": %f}\' % (s, 1 / s))',
                ],
            },
        },
    ).job
    page = new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    _sign_in(page, team["member"])
    page.goto(f"/o/studio/jobs/{job.public_id}/")
    expect(page.locator('#job-status[data-state="succeeded"]')).to_be_visible(timeout=60_000)
    page.reload()  # the whole curve drawn at once
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "8")
    expect(page.locator("#loss-chart canvas")).to_be_visible()
    light = page.evaluate(LINE_PIXELS)
    assert light["hex"] == "#2456d6"
    assert light["count"] > 20 and light["dark"] == 0, light

    page.get_by_role("button", name="Theme: System (light)").click()
    page.get_by_role("button", name="Theme: Light").click()
    _expect_background(page, DARK)
    expect(page.locator("#loss-chart canvas")).to_have_count(1)  # redrawn, not added
    dark = page.evaluate(LINE_PIXELS)
    assert dark["hex"] == "#8db0ff"
    assert dark["count"] > 20 and dark["light"] == 0, dark

    # The billing page's chart, whose day of spend this job made, redraws too.
    page.goto("/o/studio/billing/")
    expect(page.locator("#spend-chart canvas")).to_have_count(1)
    page.get_by_role("button", name="Theme: Dark").click()
    _expect_background(page, LIGHT)
    expect(page.locator("#spend-chart canvas")).to_have_count(1)
    assert errors == []


def test_every_top_bar_control_is_reached_with_tab_and_shows_its_focus(new_page, team):
    page = new_page()
    _sign_in(page, team["member"])
    page.goto("/o/studio/projects/")
    controls = page.locator(".topbar a, .topbar button, .topbar select").filter(visible=True)
    expected = controls.count()
    assert expected >= 8  # brand, the nav's links, organization, sign out, theme
    # The first stop is the skip link, shown (and ringed) only while it has the focus.
    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    expect(skip).to_be_focused()
    assert skip.evaluate("el => parseFloat(getComputedStyle(el).outlineWidth)") >= 2
    seen = []
    for _ in range(expected + 1):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """() => {
              const el = document.activeElement;
              const style = getComputedStyle(el);
              return {
                inTopbar: !!el.closest(".topbar"),
                name: el.getAttribute("aria-label") || el.textContent.trim() || el.id,
                outlineStyle: style.outlineStyle,
                outlineWidth: parseFloat(style.outlineWidth),
                outlineColor: style.outlineColor,
                boxShadow: style.boxShadow,
                focusVisible: el.matches(":focus-visible"),
              };
            }"""
        )
        if not focused["inTopbar"]:
            break
        seen.append(focused)
    assert len(seen) == expected, [f["name"] for f in seen]
    for focused in seen:
        assert focused["focusVisible"], focused
        ring = focused["outlineStyle"] != "none" and focused["outlineWidth"] >= 2
        assert ring or focused["boxShadow"] != "none", focused
        assert focused["outlineColor"] != "rgb(20, 26, 38)", focused  # not the bar's own colour
    names = " | ".join(f["name"] for f in seen)
    for name in ("Trainyard", "Projects", "Billing", "Settings", "Sign out", "Theme: System"):
        assert name in names, names
