"""What every page carries: a skip link a keyboard user meets first, which lands on the page's
main content, and the site's icon, named in the head and answered at `/favicon.ico` (which
browsers and tools ask for on their own) instead of a 404 on every page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_first_link_of_a_page_skips_to_its_main_content(client_for, member):
    body = client_for(member).get("/o/acme/").content.decode()

    first_link = re.search(r"<body[^>]*>\s*<a ([^>]*)>([^<]*)</a>", body)
    assert first_link is not None and first_link.group(2) == "Skip to content"
    assert 'href="#main"' in first_link.group(1)
    assert re.search(r'<main id="main"[^>]*>', body)


def test_the_sign_in_page_has_it_too():
    body = Client().get("/accounts/login/").content.decode()

    assert '<a class="skip-link" href="#main">Skip to content</a>' in body
    assert '<main id="main"' in body


def test_favicon_ico_leads_to_the_icon_the_pages_name(client_for, member):
    page = client_for(member).get("/o/acme/").content.decode()
    named = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', page).group(1)

    answer = Client().get("/favicon.ico")

    assert answer.status_code == 301
    assert answer["Location"] == named
    icon = Client().get(named)
    assert icon.status_code == 200
    assert icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(icon.streaming_content if icon.streaming else [icon.content])
