"""The endpoints API without an engine: what is checked before anything starts, what a
created endpoint looks like, tenancy, and the proxy's answers while nothing serves yet."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.billing.models import Transfer
from apps.finetunes import payloads as finetune_payloads
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from apps.serving.models import Endpoint, EndpointRequest, EndpointRevision

pytestmark = pytest.mark.django_db

BASE = "/models/tiny"


def _finetune(project, *, model=BASE, state=JobState.SUCCEEDED, adapter=True) -> Job:
    config = {"model": model, "dataset": "d", "dataset_format": "alpaca"}
    payload = finetune_payloads.job_payload(name="ft", project_id=project.public_id, config=config)
    job = Job.objects.create(
        organization=project.organization,
        project=project,
        name="ft",
        kind=Job.Kind.FINETUNE,
        spec={"container": payload["container"]},
        accelerator="cpu",
        gpu_count=1,
        ephemeral_disk_gb=1,
        state=state,
        attempt_count=1,
    )
    Artifact.objects.create(
        job=job, kind=Artifact.Kind.CHECKPOINT, step=2, sha256="0" * 64, storage_path="x"
    )
    if adapter:
        Artifact.objects.create(
            job=job, kind=Artifact.Kind.ADAPTER, sha256="1" * 64, storage_path="y"
        )
    return job


def _create(client, project, target, **fields):
    body = {"name": "support-bot", "project": project.public_id, "base_model": BASE}
    return client.post("/api/v1/endpoints", {**body, "target": target, **fields}, format="json")


def test_it_creates_an_endpoint_its_first_revision_and_a_serve_job(org, project, api_client_for):
    client = api_client_for(org)
    job = _finetune(project)

    response = _create(client, project, {"job": job.public_id})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["id"].startswith("ep_")
    assert body["name"] == "support-bot"
    assert body["state"] == "starting"
    assert body["current_revision"] is None
    assert [r["label"] for r in body["revisions"]] == ["r1"]
    first = body["revisions"][0]
    assert first["served_name"] == "support-bot-r1"
    assert first["state"] == "loading"
    assert first["artifact_kind"] == "adapter"
    serve = Job.objects.get(public_id=body["job_id"])
    assert serve.kind == Job.Kind.SERVE
    assert serve.state == JobState.REQUESTED
    # The engine's secret is never part of the stored spec.
    assert "TRAINYARD_SERVE_SECRET" not in json.dumps(serve.spec)
    # A serve job is billed like any job: it holds money from submit.
    assert Transfer.objects.filter(job=serve, code="hold").count() == 1


def test_it_serves_a_checkpoint_named_by_its_artifact_id(org, project, api_client_for):
    job = _finetune(project)
    checkpoint = job.artifacts.get(kind="checkpoint")

    response = _create(api_client_for(org), project, {"artifact": f"art_{checkpoint.pk}"})

    assert response.status_code == 201, response.content
    assert response.json()["revisions"][0]["artifact_step"] == 2


@pytest.mark.parametrize(
    ("fields", "status", "error_type", "param"),
    [
        ({"name": "Bad Name"}, 400, "invalid_request", "name"),
        ({"name": "-x"}, 400, "invalid_request", "name"),
        ({"target": {"artifact": "nope"}}, 400, "invalid_request", "target.artifact"),
        ({"target": {}}, 400, "invalid_request", "target"),
        ({"target": {"artifact": "art_1", "job": "job_x"}}, 400, "invalid_request", "target"),
        ({"base_model": "/models/other"}, 400, "base_model_mismatch", "target"),
        ({"extra": 1}, 400, "invalid_request", "extra"),
    ],
)
def test_it_refuses_bad_requests_and_creates_nothing(
    org, project, api_client_for, fields, status, error_type, param
):
    job = _finetune(project)
    body = {"target": {"job": job.public_id}, **fields}
    response = _create(api_client_for(org), project, **body)

    assert response.status_code == status, response.content
    assert response.json()["error"]["type"] == error_type
    assert response.json()["error"]["param"] == param
    assert not Endpoint.objects.exists()
    assert not Job.objects.filter(kind=Job.Kind.SERVE).exists()


def test_a_job_without_a_final_adapter_is_a_conflict(org, project, api_client_for):
    job = _finetune(project, adapter=False, state=JobState.RUNNING)

    response = _create(api_client_for(org), project, {"job": job.public_id})

    assert response.status_code == 409
    assert response.json()["error"]["type"] == "no_adapter"


def test_a_name_is_taken_once_per_organization(org, project, api_client_for):
    client = api_client_for(org)
    job = _finetune(project)
    assert _create(client, project, {"job": job.public_id}).status_code == 201

    again = _create(client, project, {"job": job.public_id})

    assert again.status_code == 409
    assert again.json()["error"]["type"] == "endpoint_name_taken"
    assert Endpoint.objects.count() == 1
    assert Job.objects.filter(kind=Job.Kind.SERVE).count() == 1


def test_another_organizations_objects_are_not_there(
    org, project, other_org, other_project, api_client_for
):
    theirs = _finetune(other_project)
    mine = api_client_for(org)

    assert _create(mine, project, {"job": theirs.public_id}).status_code == 404
    artifact = theirs.artifacts.first()
    assert _create(mine, project, {"artifact": f"art_{artifact.pk}"}).status_code == 404
    assert _create(mine, other_project, {"job": _finetune(project).public_id}).status_code == 404

    created = _create(api_client_for(other_org), other_project, {"job": theirs.public_id})
    endpoint_id = created.json()["id"]
    for path in ("", "/usage"):
        assert mine.get(f"/api/v1/endpoints/{endpoint_id}{path}").status_code == 404
    for path in ("/rollback", "/stop"):
        assert mine.post(f"/api/v1/endpoints/{endpoint_id}{path}").status_code == 404
    put = mine.put(
        f"/api/v1/endpoints/{endpoint_id}/target", {"target": {"job": "x"}}, format="json"
    )
    assert put.status_code == 404
    assert mine.get("/api/v1/endpoints").json()["data"] == []
    assert Endpoint.objects.get(public_id=endpoint_id).state == Endpoint.State.STARTING


def test_a_viewer_key_reads_but_cannot_create(org, project, api_client_for):
    job = _finetune(project)
    viewer = api_client_for(org, role="viewer")

    assert _create(viewer, project, {"job": job.public_id}).status_code == 403
    assert viewer.get("/api/v1/endpoints").status_code == 200


def test_a_new_target_is_a_new_revision_with_a_new_served_name(org, project, api_client_for):
    client = api_client_for(org)
    first, second = _finetune(project), _finetune(project)
    endpoint_id = _create(client, project, {"job": first.public_id}).json()["id"]

    response = client.put(
        f"/api/v1/endpoints/{endpoint_id}/target",
        {"target": {"job": second.public_id}},
        format="json",
    )

    assert response.status_code == 202, response.content
    assert response.json()["revision"]["label"] == "r2"
    assert response.json()["revision"]["served_name"] == "support-bot-r2"
    names = EndpointRevision.objects.order_by("number").values_list("served_name", flat=True)
    assert list(names) == ["support-bot-r1", "support-bot-r2"]


def test_rollback_without_a_previous_revision_is_a_conflict(org, project, api_client_for):
    client = api_client_for(org)
    endpoint_id = _create(client, project, {"job": _finetune(project).public_id}).json()["id"]

    response = client.post(f"/api/v1/endpoints/{endpoint_id}/rollback")

    assert response.status_code == 409
    assert response.json()["error"]["type"] == "no_previous_revision"


def test_stop_ends_the_serve_job_and_retires_the_revisions(org, project, api_client_for):
    client = api_client_for(org)
    endpoint_id = _create(client, project, {"job": _finetune(project).public_id}).json()["id"]

    response = client.post(f"/api/v1/endpoints/{endpoint_id}/stop")

    assert response.status_code == 200
    assert response.json()["state"] == "stopped"
    endpoint = Endpoint.objects.get(public_id=endpoint_id)
    assert endpoint.job.state == JobState.TERMINATED
    assert set(endpoint.revisions.values_list("state", flat=True)) == {"retired"}
    again = client.put(
        f"/api/v1/endpoints/{endpoint_id}/target",
        {"target": {"job": _finetune(project).public_id}},
        format="json",
    )
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "endpoint_stopped"


# -- the proxy before anything serves ----------------------------------------------------


def _chat(client: Client, model: str, key: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return client.post(
        "/v1/chat/completions",
        json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        content_type="application/json",
        **headers,
    )


def test_the_proxy_wants_a_key_and_keeps_tenants_apart(org, project, other_org, api_client_for):
    from apps.accounts import services as account_services

    _create(api_client_for(org), project, {"job": _finetune(project).public_id})
    _, mine = account_services.api_key_create(organization=org, name="mine")
    _, theirs = account_services.api_key_create(organization=other_org, name="theirs")
    client = Client()

    assert _chat(client, "support-bot", None).status_code == 401
    assert _chat(client, "support-bot", None).json()["error"]["type"] == "unauthenticated"
    assert _chat(client, "support-bot", "ty_abc_wrong").status_code == 401
    other = _chat(client, "support-bot", theirs)
    assert other.status_code == 404
    assert other.json()["error"]["type"] == "model_not_found"
    starting = _chat(client, "support-bot", mine)
    assert starting.status_code == 503
    assert starting.json()["error"]["type"] == "endpoint_not_ready"
    assert starting["Retry-After"]
    assert _chat(client, "support-bot@r9", mine).status_code == 404
    models = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {mine}").json()
    assert [m["id"] for m in models["data"]] == ["support-bot"]
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {theirs}").json()["data"] == []
    assert not EndpointRequest.objects.exists()


@pytest.mark.parametrize(
    "body", [b"not json", b"[1]", b'{"model": 5}', b'{"messages": []}', b"\xff\xfe"]
)
def test_the_proxy_answers_bad_bodies_with_400(org, body):
    from apps.accounts import services as account_services

    _, key = account_services.api_key_create(organization=org, name="k")
    response = Client().post(
        "/v1/chat/completions",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
