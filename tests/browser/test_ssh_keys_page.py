"""Your SSH keys on the Settings page, in real Chromium at a phone's width (360 px): add a
key (htmx swaps the section in place), see it listed with its fingerprint, remove it after
the confirmation; the section fits the width and axe finds no serious violation in it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.accounts.models import SshKey
from tests import sshkeys
from tests.browser.test_accessibility import blocking_violations, describe

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_add_and_remove_a_key_at_360_px(signed_in, team, screenshot):
    member = team["member"]
    page = signed_in(member)
    page.set_viewport_size({"width": 360, "height": 780})
    page.goto("/o/studio/settings/")
    section = page.locator("#ssh-keys")
    expect(section.get_by_text("No SSH keys yet.")).to_be_visible()

    section.get_by_label("Public key").fill("ssh-dss AAAAB3NzaC1kc3M= old@box")
    section.get_by_role("button", name="Add key").click()
    expect(section.get_by_text("DSA keys are not accepted")).to_be_visible()

    line = sshkeys.ed25519_line("me@phone")
    section.get_by_label("Public key").fill(line)
    section.get_by_role("button", name="Add key").click()
    key = None
    expect(page.locator("#ssh-keys .ssh-key")).to_have_count(1)
    key = SshKey.objects.get(user=member)
    expect(page.locator("#ssh-keys .ssh-key-fingerprint")).to_have_text(key.fingerprint)
    expect(page.locator("#ssh-keys .ssh-key-name")).to_contain_text("me@phone")
    assert page.url.endswith("/o/studio/settings/")  # swapped in place, no navigation

    width = page.evaluate(
        "() => { const s = document.getElementById('ssh-keys');"
        " return [s.scrollWidth, s.clientWidth, s.getBoundingClientRect().right]; }"
    )
    assert width[0] <= width[1] and width[2] <= 360, width
    problems = [
        describe("settings at 360 px", v)
        for v in blocking_violations(page)
        if any("ssh" in target for target in v["targets"])
    ]
    assert problems == []
    screenshot(page, "settings-ssh-keys-360")

    page.once("dialog", lambda dialog: dialog.accept())
    section.get_by_role("button", name="Remove").click()
    expect(page.locator("#ssh-keys").get_by_text("No SSH keys yet.")).to_be_visible()
    assert not SshKey.objects.filter(user=member).exists()
