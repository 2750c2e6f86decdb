import pytest

from apps.accounts.models import Role
from apps.projects.models import Project

pytestmark = pytest.mark.django_db


def test_it_lists_only_the_callers_projects(api_client_for, org, project, other_project):
    body = api_client_for(org).get("/api/v1/projects").json()
    assert [p["id"] for p in body["data"]] == [project.public_id]
    assert body["total"] == 1


def test_a_member_key_creates_a_project(api_client_for, org):
    response = api_client_for(org).post("/api/v1/projects", {"name": "LLM evals"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["slug"] == "llm-evals"
    assert body["id"].startswith("proj_")
    assert Project.objects.get(public_id=body["id"]).organization == org


def test_a_viewer_key_gets_permission_denied(api_client_for, org):
    response = api_client_for(org, role=Role.VIEWER).post(
        "/api/v1/projects", {"name": "Nope"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_denied"
    assert not Project.objects.exists()


def test_another_orgs_project_is_404_not_found(api_client_for, org, other_project):
    response = api_client_for(org).get(f"/api/v1/projects/{other_project.public_id}")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"type": "not_found", "message": "Not found.", "param": None}
    }


def test_a_missing_name_is_invalid_request_naming_the_param(api_client_for, org):
    response = api_client_for(org).post("/api/v1/projects", {"slug": "x"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == "name"


def test_a_taken_slug_is_409(api_client_for, org, project):
    response = api_client_for(org).post(
        "/api/v1/projects", {"name": "Vision 2", "slug": "vision"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["param"] == "slug"


def test_malformed_json_is_invalid_request(api_client_for, org):
    response = api_client_for(org).post(
        "/api/v1/projects", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"


def test_an_unknown_api_path_is_a_json_404(api_client_for, org):
    response = api_client_for(org).get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_a_wrong_method_is_405_method_not_allowed(api_client_for, org):
    response = api_client_for(org).delete("/api/v1/whoami")
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"
