"""Real Chromium (Debian's package) driven by Playwright against the live stack."""

from __future__ import annotations

import importlib
import os
import re
import shutil
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from playwright.sync_api import sync_playwright

from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory
from tests.live import ROOT

# Playwright's sync API runs an event loop in the test's thread; the test's own ORM calls are
# still plain synchronous code, so Django's async-safety guard is lifted for these tests.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "var" / "screenshots"
PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the session. Playwright's event loop must not outlive the browser
    tests, or the tests after them would see Django connections of another context: the
    browser tests run last on their worker (tests/parallel.py `Order`), so nothing follows."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed: `apt-get install chromium` (.ci/run does it).")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
            ],
        )
        yield instance
        instance.close()


@pytest.fixture
def screenshot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def _reseed_catalog() -> None:
    """Re-run the catalog's seed migrations (idempotent). Once Playwright's event loop runs
    in this thread, Django's connection for the test is a fresh one without the serialized
    seed rows that serialized_rollback would restore, so the seed is applied again here."""
    for name in ("0002_seed_accelerators", "0004_seed_local_offer"):
        importlib.import_module(f"apps.catalog.migrations.{name}").seed(django_apps, None)


@pytest.fixture
def team(transactional_db):
    """An organization with compute, a project, and a member; plus an outsider elsewhere."""
    _reseed_catalog()
    org = OrganizationFactory(slug="studio", name="Studio", compute_enabled=True)
    project = ProjectFactory(organization=org, name="Speech", slug="speech")
    member = MembershipFactory(organization=org, role="member", user=UserFactory()).user
    other = OrganizationFactory(slug="rivals", name="Rivals", compute_enabled=True)
    outsider = MembershipFactory(organization=other, role="owner", user=UserFactory()).user
    return {"org": org, "project": project, "member": member, "outsider": outsider}


@pytest.fixture
def signed_in(browser, live_stack):
    """A function: a fresh browser context signed in through the login form."""
    contexts = []

    def sign_in(user, **context_options):
        """A fresh browser context signed in as `user` (options: Playwright's, e.g.
        `timezone_id`)."""
        context = browser.new_context(
            base_url=live_stack.url, viewport={"width": 1280, "height": 900}, **context_options
        )
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(user.username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(re.compile(r"/o/[^/]+/$"))  # the organization's overview
        return page

    yield sign_in
    for context in contexts:
        context.close()
