"""The New Job page's quote says what submitting holds (two hours at the price ceiling) and
whether the organization's available balance covers it, on both forms."""

from __future__ import annotations

import re

import pytest

from apps.accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGE = "/o/acme/projects/vision/jobs/new/"
QUOTE = "/o/acme/quote/"
CPU = {"accelerator": "cpu", "gpu_count": "1"}
# The seeded cpu offer costs $0.10 per slot-hour: two hours hold $0.20.
CPU_HOLD = 'Submitting holds <strong class="hold-amount">$0.20</strong> (2 h at the price ceiling)'


def quote_box(body: str, box_id: str) -> str:
    return re.search(rf'<div id="{box_id}"[^>]*>(.*?)</div>', body, re.S).group(1)


def test_the_quote_shows_the_hold_and_the_available_balance(client_for, member, org):
    body = client_for(member).get(QUOTE, CPU).content.decode()

    assert CPU_HOLD in body
    assert "$1,000.00 available" in body
    assert 'data-short="false"' in body
    assert "not enough" not in body


def test_a_price_ceiling_sets_the_hold_and_max_cost_caps_it(client_for, member, org):
    client = client_for(member)

    ceiling = client.get(QUOTE, {**CPU, "max_price_usd_hr": "0.5"}).content.decode()
    assert '<strong class="hold-amount">$1.00</strong>' in ceiling
    capped = client.get(
        QUOTE, {**CPU, "max_price_usd_hr": "0.5", "max_cost_usd": "0.3"}
    ).content.decode()
    assert '<strong class="hold-amount">$0.30</strong>' in capped
    unreadable = client.get(QUOTE, {**CPU, "max_price_usd_hr": "lots"}).content.decode()
    assert CPU_HOLD in unreadable  # as if no ceiling were typed (the form says why on submit)


def test_a_ceiling_below_every_offer_says_so_instead(client_for, member, org):
    body = client_for(member).get(QUOTE, {**CPU, "max_price_usd_hr": "0.01"}).content.decode()

    assert "below every offer that could run this job" in body
    assert "Submitting holds" not in body


def test_a_short_balance_says_not_enough_available(client_for):
    poor = OrganizationFactory(slug="poor", name="Poor", credits_usd="0.15")
    user = MembershipFactory(organization=poor, role=Role.MEMBER, user=UserFactory()).user

    body = client_for(user).get("/o/poor/quote/", CPU).content.decode()

    assert "$0.20" in body
    assert "not enough available: $0.15" in body
    assert 'data-short="true"' in body


def test_the_new_job_page_shows_the_hold_on_both_forms(client_for, member, project):
    body = client_for(member).get(PAGE).content.decode()

    for box in ("quote", "finetune-quote"):
        assert "Submitting holds" in quote_box(body, box)
        assert "$1,000.00 available" in quote_box(body, box)


def test_a_short_balance_shows_on_the_page(client_for):
    poor = OrganizationFactory(slug="poor", name="Poor", credits_usd=0)
    ProjectFactory(organization=poor, slug="p")
    user = MembershipFactory(organization=poor, role=Role.MEMBER, user=UserFactory()).user

    body = client_for(user).get("/o/poor/projects/p/jobs/new/").content.decode()

    assert "not enough available: $0.00" in quote_box(body, "quote")


def test_the_limit_fields_ask_for_the_quote_again(client_for, member, project):
    body = client_for(member).get(PAGE).content.decode()

    for field in (
        "container-max_price_usd_hr",
        "container-max_cost_usd",
        "container-priority_class",
    ):
        tag = re.search(rf'<[^>]*id="{field}"[^>]*>', body).group(0)
        assert 'hx-get="/o/acme/quote/"' in tag and 'hx-target="#quote"' in tag
    tag = re.search(r'<[^>]*id="finetune-priority_class"[^>]*>', body).group(0)
    assert 'hx-target="#finetune-quote"' in tag


def test_a_rejected_ceiling_is_quoted_as_typed(client_for, member, project):
    """After a submit the service refused, the quote reflects the typed ceiling."""
    response = client_for(member).post(
        PAGE,
        {
            "form": "container",
            "name": "cheap",
            "image": "python:3.11-slim",
            "command": "true",
            "accelerator": "cpu",
            "gpu_count": "1",
            "disk_gb": "10",
            "priority_class": "standard",
            "max_price_usd_hr": "0.01",
        },
    )

    assert response.status_code == 200
    assert "below every offer that could run this job" in quote_box(
        response.content.decode(), "quote"
    )


def test_a_submit_the_balance_cannot_cover_is_refused_on_the_form_and_creates_nothing(client_for):
    from apps.jobs.models import Job
    from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory
    from tests.jobs.web.test_new_job_page import container_data

    poor = OrganizationFactory(slug="poor", credits_usd=0)
    ProjectFactory(organization=poor, slug="vision")
    member = MembershipFactory(organization=poor, role="member").user

    response = client_for(member).post(
        "/o/poor/projects/vision/jobs/new/", container_data(command="true")
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "This job needs $0.20 available" in page
    assert "the organization has $0.00 available" in page
    assert not Job.objects.exists()
