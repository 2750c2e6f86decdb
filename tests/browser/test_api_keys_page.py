"""A new API key on the Settings page, in real Chromium: shown once, with a Copy button that
puts exactly the key on the clipboard (and says so), and the key it copied works."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_copy_button_puts_the_new_key_on_the_clipboard(signed_in, team, live_stack):
    owner = team["outsider"]  # the owner of "rivals": owners manage keys
    page = signed_in(owner, permissions=["clipboard-read", "clipboard-write"])
    page.goto("/o/rivals/settings/")
    section = page.locator("#api-keys")  # Your SSH keys, above, has a "Key name" too
    section.get_by_label("Name").fill("laptop")
    section.get_by_role("button", name="Create key").click()
    shown = page.locator("#new-key-value").inner_text().strip()

    copy = page.locator("#new-key .copy-button")  # by place: its name changes as it answers
    expect(copy).to_have_text("Copy")
    copy.click()

    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == shown
    whoami = requests.get(
        f"{live_stack.url}/api/v1/whoami", headers={"Authorization": f"Bearer {shown}"}, timeout=10
    )
    assert whoami.status_code == 200 and whoami.json()["organization"]["slug"] == "rivals"
    expect(copy).to_have_text("Copy", timeout=5_000)  # back to its name
