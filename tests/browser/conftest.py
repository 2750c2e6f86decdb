"""Real Chromium (Debian's package) driven by Playwright against the live stack."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from playwright.sync_api import sync_playwright

from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory
from tests.live import ROOT

# Playwright's sync API runs an event loop in the test's thread; the test's own ORM calls are
# still plain synchronous code, so Django's async-safety guard is lifted for these tests.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "var" / "screenshots"
PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="module")
def browser():
    """One Chromium per module. While Playwright's sync API runs its event loop in this
    thread, Django hands this thread's code a connection of another context: one that lacks
    the serialized seed rows of the test database, so a serialized-rollback test would
    neither restore them nor flush without re-running post_migrate (and the next such test
    on the worker would fail on duplicate content types). That connection gets them here;
    the loop ends with the module."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed: `apt-get install chromium` (.ci/run does it).")
    serialized = getattr(connections[DEFAULT_DB_ALIAS], "_test_serialized_contents", None)
    with sync_playwright() as playwright:
        if serialized is not None:
            connections[DEFAULT_DB_ALIAS]._test_serialized_contents = serialized
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


@pytest.fixture
def team(transactional_db):
    """An organization with compute, a project, and a member; plus an outsider elsewhere."""
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
