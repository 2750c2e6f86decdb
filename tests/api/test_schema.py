"""The OpenAPI schema is served and valid, describes the body of every operation's success,
and no generated request makes the app answer 500 or a body its schema does not describe
(schemathesis, calling the WSGI app in the test's transaction; the ASGI server's own guards
have their tests in tests/config)."""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.jobs.artifacts.store import public_artifact_id
from apps.jobs.models import Artifact
from tests.factories import OrganizationFactory, ProjectFactory
from tests.serving.test_endpoints_api import _finetune as finetune_with_adapter


def test_the_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert schema.json()["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    for path in (
        "/api/v1/whoami",
        "/api/v1/compute/catalog/accelerators",
        "/api/v1/compute/jobs",
        "/api/v1/compute/jobs/{job_id}/terminate",
        "/api/v1/compute/jobs/{job_id}/logs",
        "/api/v1/compute/jobs/{job_id}/events",
        "/api/v1/compute/secrets",
        "/api/v1/compute/catalog/quotes",
        "/api/v1/projects/{project_id}/finetunes",
    ):
        assert path in paths, path
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()
    assert b"cdn" not in docs.content.lower()


def _generated_schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _load_schema():
    return schemathesis.openapi.from_dict(_generated_schema())


def _undescribed(schema: dict, body: dict | None) -> bool:
    """Whether a response body schema says nothing of the body: missing, or a bare `object`
    (no properties, no additionalProperties)."""
    if not body:
        return True
    if "$ref" in body:
        name = body["$ref"].rsplit("/", 1)[-1]
        return _undescribed(schema, schema["components"]["schemas"][name])
    if body.get("type", "object") != "object":
        return False
    return not (body.get("properties") or body.get("additionalProperties") or body.get("allOf"))


def test_every_success_of_every_operation_has_a_described_body():
    schema = _generated_schema()
    undescribed = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if not code.startswith("2") or code == "204":
                    continue
                content = response.get("content") or {"(none)": {}}
                for media_type, body in content.items():
                    if _undescribed(schema, body.get("schema")):
                        undescribed.append(f"{method.upper()} {path} {code} {media_type}")
    assert undescribed == []


# One test per operation. Driven through Hypothesis directly: schemathesis' own pytest
# plugin does not run under pytest 9.
OPERATIONS = {
    op.label: op for op in (result.ok() for result in _load_schema().get_all_operations())
}


@pytest.fixture
def fuzz_key(db):
    org = OrganizationFactory(slug="fuzz", compute_enabled=True)
    ProjectFactory(organization=org)
    _, key = account_services.api_key_create(organization=org, name="fuzz")
    return key


@pytest.fixture
def wsgi_app():
    """The app itself, called in this test's transaction (no server, no flush per test).
    Like Django's test client, a request does not close the test's database connection."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_no_generated_request_is_a_server_error_or_an_undescribed_body(label, wsgi_app, fuzz_key):
    headers = {"Authorization": f"Bearer {fuzz_key}", "Idempotency-Key": "fuzz"}

    @given(case=OPERATIONS[label].as_strategy())
    @settings(
        max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def no_server_error_and_bodies_as_described(case):
        response = case.call(app=wsgi_app, headers=headers)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    no_server_error_and_bodies_as_described()


def _answered(wsgi_app, key: str, label: str, status: int, **case) -> dict:
    """The body of `label` called with `case`, checked against the operation's schema."""
    made = OPERATIONS[label].Case(**case)
    response = made.call(app=wsgi_app, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == status, response.text[:300]
    made.validate_response(response, checks=[response_schema_conformance])
    return response.json()


def test_the_bodies_of_an_organization_with_endpoints_and_budgets_are_as_described(db, wsgi_app):
    """Generated ids miss every object, so the fuzz above meets lists and errors; here each
    kind of object exists and every body it answers is checked against the schema."""
    org = OrganizationFactory(slug="described", compute_enabled=True)
    project = ProjectFactory(organization=org)
    _, key = account_services.api_key_create(organization=org, name="admin", role=Role.ADMIN)
    tuned = finetune_with_adapter(project)
    checkpoint = public_artifact_id(tuned.artifacts.get(kind=Artifact.Kind.CHECKPOINT))

    def answered(label: str, status: int = 200, **case) -> dict:
        return _answered(wsgi_app, key, label, status, **case)

    created = answered(
        "POST /api/v1/endpoints",
        201,
        body={
            "name": "bot",
            "project": project.public_id,
            "base_model": "/models/tiny",
            "target": {"job": tuned.public_id},
        },
        media_type="application/json",
    )
    endpoint = {"endpoint_id": created["id"]}
    target = {"target": {"artifact": checkpoint}}
    assert (
        answered(
            "PUT /api/v1/endpoints/{endpoint_id}/target",
            202,
            path_parameters=endpoint,
            body=target,
            media_type="application/json",
        )["revision"]["artifact"]
        == checkpoint
    )
    listed = answered("GET /api/v1/endpoints")
    assert (listed["object"], listed["total"], listed["data"][0]["id"]) == (
        "list",
        1,
        created["id"],
    )
    answered("GET /api/v1/endpoints/{endpoint_id}", path_parameters=endpoint)
    answered("GET /api/v1/endpoints/{endpoint_id}/usage", path_parameters=endpoint)
    stopped = answered("POST /api/v1/endpoints/{endpoint_id}/stop", path_parameters=endpoint)
    assert stopped["state"] == "stopped"

    budget = answered(
        "POST /api/v1/billing/budgets",
        201,
        body={"limit_usd": "5", "project": project.public_id},
        media_type="application/json",
    )
    answered(
        "PATCH /api/v1/billing/budgets/{budget_id}",
        path_parameters={"budget_id": budget["id"]},
        body={"thresholds": [90]},
        media_type="application/json",
    )
    answered("GET /api/v1/billing/budgets/{budget_id}", path_parameters={"budget_id": budget["id"]})
    assert answered("GET /api/v1/billing/budgets")["total"] == 1
    assert [b["id"] for b in answered("GET /api/v1/billing/summary")["budgets"]] == [budget["id"]]
    assert answered("GET /api/v1/billing/transactions")["total"] >= 1  # the serve job's hold

    job = {"job_id": created["job_id"]}  # the serve job, made by job_create
    state = answered("GET /api/v1/compute/jobs/{job_id}", path_parameters=job)["state"]
    answered("GET /api/v1/compute/jobs/{job_id}/events", path_parameters=job)
    answered("GET /api/v1/compute/jobs/{job_id}/artifacts", path_parameters=job)
    answered("GET /api/v1/compute/jobs/{job_id}/metrics", path_parameters=job)
    alike = answered("GET /api/v1/compute/jobs", query={"state": state})
    assert [j["id"] for j in alike["data"]] == [created["job_id"]]
