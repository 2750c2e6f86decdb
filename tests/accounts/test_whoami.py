import pytest
from rest_framework.test import APIClient

from apps.accounts.models import Organization, Role
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def test_it_describes_the_key_its_org_role_and_projects(
    api_client_for, org, project, other_project
):
    response = api_client_for(org, role=Role.VIEWER).get("/api/v1/whoami")
    assert response.status_code == 200
    body = response.json()
    assert body["principal"] == "api_key"
    assert body["user"] is None
    assert body["api_key"]["name"] == "test"
    assert body["api_key"]["prefix"].startswith("ty_")
    assert body["organization"] == {
        "id": org.id,
        "slug": "acme",
        "name": "Acme",
        "kind": "team",
        "compute_enabled": True,
    }
    assert body["role"] == "viewer"
    assert body["projects"] == [{"id": project.public_id, "slug": "vision", "name": "Vision"}]


def test_it_describes_a_signed_in_user(member, org):
    client = APIClient()
    client.force_login(member)
    body = client.get("/api/v1/whoami").json()
    assert body["principal"] == "user"
    assert body["user"]["username"] == member.username
    assert body["api_key"] is None
    assert body["role"] == "member"
    assert body["organization"]["slug"] == "acme"


def test_a_user_in_two_orgs_picks_one_by_header(member, org, other_org):
    MembershipFactory(user=member, organization=other_org, role=Role.VIEWER)
    client = APIClient()
    client.force_login(member)
    body = client.get("/api/v1/whoami", HTTP_X_TRAINYARD_ORG="globex").json()
    assert body["organization"]["slug"] == "globex"
    assert body["role"] == "viewer"


def test_naming_an_org_you_are_not_in_is_404(member, other_org):
    client = APIClient()
    client.force_login(member)
    response = client.get("/api/v1/whoami", HTTP_X_TRAINYARD_ORG="globex")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_compute_endpoints_are_403_tenant_disabled_without_compute(api_client_for, org):
    Organization.objects.filter(pk=org.pk).update(compute_enabled=False)
    client = api_client_for(org)
    response = client.get("/api/v1/compute/catalog/accelerators")
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "tenant_disabled"
    assert client.get("/api/v1/whoami").json()["organization"]["compute_enabled"] is False


def test_compute_endpoints_answer_when_compute_is_enabled(api_client_for, org):
    response = api_client_for(org).get("/api/v1/compute/catalog/accelerators")
    assert response.status_code == 200
    names = [a["name"] for a in response.json()["data"]]
    assert "cpu" in names
    assert "nvidia-rtx-4090-24gb" in names
