"""Pages shaped alike (issue 44, "Layout"): each of a project's pages shows the same tabs, the
Datasets tab offers New job like the Jobs tab, the Endpoints list offers New endpoint (a
project's Playground, where endpoints are deployed), and the Settings and Datasets forms
render field by field like the New Job page instead of Django's `as_p`. How the pages fit a
phone is tests/browser/test_responsive.py."""

from __future__ import annotations

import re

import pytest

from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db

BASE = "/o/acme/projects/vision/"
TABS = [
    ("Jobs", BASE),
    ("Datasets", f"{BASE}datasets/"),
    ("Playground", f"{BASE}playground/"),
    ("Sweeps", f"{BASE}sweeps/"),
]
TAB_LINK = re.compile(
    r'<a class="tab( active)?"(?: aria-current="page")? href="([^"]+)">([^<]+)</a>'
)


def body_of(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def project_tabs(body: str) -> list[tuple[str, str, bool]]:
    nav = re.search(r'<nav class="tabs" aria-label="Project sections">(.*?)</nav>', body, re.S)
    assert nav, "the project's tabs are missing"
    return [(label, href, bool(active)) for active, href, label in TAB_LINK.findall(nav.group(1))]


@pytest.mark.parametrize("current", [label for label, _ in TABS], ids=str.lower)
def test_every_project_page_shows_all_its_tabs_with_its_own_marked(
    client_for, member, project, current
):
    url = dict(TABS)[current]

    tabs = project_tabs(body_of(client_for(member), url))

    assert tabs == [(label, href, label == current) for label, href in TABS]


def test_the_datasets_tab_offers_new_job_to_members_not_viewers(
    client_for, member, viewer, project
):
    new_job = f'<a class="button" href="{BASE}jobs/new/">New job</a>'
    assert new_job in body_of(client_for(member), f"{BASE}datasets/")
    assert new_job not in body_of(client_for(viewer), f"{BASE}datasets/")


class TestNewEndpoint:
    def test_with_one_project_it_opens_that_projects_playground(self, client_for, member, project):
        body = body_of(client_for(member), "/o/acme/endpoints/")

        assert (
            f'<a class="button" id="new-endpoint" href="{BASE}playground/">New endpoint</a>' in body
        )

    def test_with_several_projects_it_asks_which_playground(
        self, client_for, member, project, org, other_project
    ):
        ProjectFactory(organization=org, name="Audio", slug="audio")

        body = body_of(client_for(member), "/o/acme/endpoints/")

        menu = re.search(r'<details class="menu" id="new-endpoint">(.*?)</details>', body, re.S)
        assert menu, "no New endpoint menu"
        assert re.findall(r'<a href="([^"]+)">from ([^<]+)</a>', menu.group(1)) == [
            ("/o/acme/projects/audio/playground/", "Audio's Playground"),
            (f"{BASE}playground/", "Vision's Playground"),
        ]  # another organization's project is never offered
        assert "secret-plans" not in body

    def test_a_viewer_is_not_offered_it(self, client_for, viewer, project):
        assert "New endpoint" not in body_of(client_for(viewer), "/o/acme/endpoints/")


def _fields(body: str, form_marker: str) -> tuple[list[str], str]:
    """The names of the inputs that sit in a `div.field` of the form whose tag holds
    `form_marker`, and the form's inside."""
    form = re.search(rf"<form[^>]*{form_marker}[^>]*>(.*?)</form>", body, re.S)
    assert form, f"no form {form_marker}"
    names = re.findall(
        r'<div class="field">(?:(?!<div class="field">).)*?name="([a-z_]+)"', form.group(1), re.S
    )
    return names, form.group(1)


@pytest.mark.parametrize(
    ("who", "url", "form_marker", "fields"),
    [
        (
            "member",
            f"{BASE}datasets/",
            'enctype="multipart/form-data"',
            ["name", "file", "dataset_format"],
        ),
        ("member", "/o/acme/settings/", 'class="ssh-key-add', ["public_key", "name"]),
        ("admin", "/o/acme/settings/", 'class="inline-form form-fields"', ["name", "role"]),
        (
            "admin",
            "/o/acme/settings/webhooks/",
            'class="inline-form form-fields"',
            ["url", "events", "format", "description"],
        ),
        ("member", "/o/acme/projects/new/", 'class="form-fields"', ["name", "slug", "description"]),
        (
            "member",
            f"{BASE}sweeps/new/",
            'id="sweep-form"',
            [
                "name",
                "kind",
                "template",
                "params",
                "method",
                "samples",
                "seed",
                "concurrency",
                "max_cost_usd",
                "objective",
                "direction",
            ],
        ),
    ],
    ids=["dataset-upload", "ssh-key", "api-key", "webhook", "new-project", "new-sweep"],
)
def test_forms_render_field_by_field_not_as_paragraphs(
    request, client_for, project, who, url, form_marker, fields
):
    body = body_of(client_for(request.getfixturevalue(who)), url)

    names, form = _fields(body, form_marker)

    assert names == fields
    assert "<p>" not in form  # not Django's as_p


def test_a_refused_upload_shows_its_error_inside_the_field(
    client_for, member, project, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    response = client_for(member).post(f"{BASE}datasets/", {"dataset_format": "alpaca"})

    assert response.status_code == 400
    field = re.search(
        r'<div class="field"><label for="id_name">.*?</div>', response.content.decode(), re.S
    )
    assert field and "This field is required." in field.group(0)
