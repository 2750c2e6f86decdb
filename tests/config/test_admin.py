"""The Django admin lists and opens every model an operator manages."""

import pytest

from apps.accounts import services
from tests.factories import UserFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


@pytest.mark.parametrize(
    "model",
    [
        "accounts/organization",
        "accounts/membership",
        "accounts/apikey",
        "accounts/user",
        "projects/project",
        "catalog/accelerator",
        "catalog/offer",
        "providers/provider",
        "jobs/job",
        "jobs/artifact",
        "secrets/secret",
    ],
)
def test_each_changelist_renders(operator_client, org, member, project, model):
    make_job(org)
    services.api_key_create(organization=org, name="ops")
    response = operator_client.get(f"/admin/{model}/")
    assert response.status_code == 200


def test_a_job_opens_read_only_with_its_events(operator_client, org):
    job = make_job(org)
    response = operator_client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert response.status_code == 200
    body = response.content.decode()
    assert job.public_id in body
    assert "job_created" in body
    assert 'name="state"' not in body


def test_an_org_can_be_given_compute(operator_client, org):
    org.compute_enabled = False
    org.save()
    response = operator_client.post(
        f"/admin/accounts/organization/{org.pk}/change/",
        {
            "name": org.name,
            "slug": org.slug,
            "kind": "team",
            "compute_enabled": "on",
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert org.compute_enabled is True
