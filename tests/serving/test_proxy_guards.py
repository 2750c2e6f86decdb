"""The OpenAI-compatible path (`/v1/`) under the REST API's rules for a key: one throttle
window for both paths, the key's last use recorded, an organization without compute refused;
and input that is not what it claims (a revision pin, usage days) is a 400, never a 500.
No engine runs: an endpoint's serve job stays requested."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from apps.accounts import services as account_services
from apps.accounts.models import ApiKey
from apps.finetunes import payloads as finetune_payloads
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from apps.serving import services as serving_services
from apps.serving.models import Endpoint, EndpointRequest

pytestmark = pytest.mark.django_db

BASE = "/models/tiny"


def make_endpoint(project, name: str = "support-bot") -> Endpoint:
    """An endpoint whose serve job was created and never started."""
    config = {"model": BASE, "dataset": "d", "dataset_format": "alpaca"}
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
        state=JobState.SUCCEEDED,
        attempt_count=1,
    )
    Artifact.objects.create(job=job, kind=Artifact.Kind.ADAPTER, sha256="1" * 64, storage_path="y")
    return serving_services.endpoint_create(
        organization=project.organization,
        project_id=project.public_id,
        name=name,
        base_model=BASE,
        target={"job": job.public_id},
    )


def _key(org, name: str = "k") -> tuple[ApiKey, Client]:
    key, full = account_services.api_key_create(organization=org, name=name)
    return key, Client(HTTP_AUTHORIZATION=f"Bearer {full}")


def _chat(client: Client, model: str):
    return client.post(
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "hi"}]},
        content_type="application/json",
    )


def _is_openai_error(response, status: int, error_type: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "param"}
    assert body["error"]["type"] == error_type


def _away_from_a_window_edge(seconds: float = 3) -> None:
    """Counts are per clock minute: start a burst where it cannot straddle two."""
    while 60 - time.time() % 60 < seconds:
        time.sleep(0.1)


# -- T3-11 -----------------------------------------------------------------------------------


def test_the_openai_path_and_the_rest_api_share_one_window_per_key(org, project, settings):
    settings.API_REQUESTS_PER_MINUTE = 4
    make_endpoint(project)
    _, busy = _key(org, "busy")
    _, calm = _key(org, "calm")
    _away_from_a_window_edge()

    answers = [
        busy.get("/api/v1/whoami").status_code,
        busy.get("/v1/models").status_code,
        _chat(busy, "support-bot").status_code,  # counted, then 503: nothing serves yet
        busy.get("/api/v1/whoami").status_code,
    ]
    refused = [busy.get("/v1/models"), _chat(busy, "support-bot"), busy.get("/api/v1/whoami")]

    assert answers == [200, 200, 503, 200]
    for response in refused:
        _is_openai_error(response, 429, "rate_limited")
        assert 0 < int(response["Retry-After"]) <= 60
    assert calm.get("/v1/models").status_code == 200  # another key has its own window
    assert EndpointRequest.objects.count() == 0


def test_inference_records_the_keys_last_use(org, project):
    make_endpoint(project)
    listing, lister = _key(org, "lister")
    chatting, chatter = _key(org, "chatter")
    unused, _ = _key(org, "unused")

    assert lister.get("/v1/models").status_code == 200
    assert _chat(chatter, "support-bot").status_code == 503

    for key in (listing, chatting):
        key.refresh_from_db()
        assert key.last_used_at is not None
    unused.refresh_from_db()
    assert unused.last_used_at is None


def test_an_organization_whose_compute_is_off_is_refused_as_the_rest_api_refuses_it(org, project):
    make_endpoint(project)
    _, client = _key(org)
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])

    rest = client.get("/api/v1/endpoints")
    _is_openai_error(rest, 403, "tenant_disabled")
    for response in (
        client.get("/v1/models"),
        _chat(client, "support-bot"),
        client.post("/v1/completions", {"model": "support-bot"}, content_type="application/json"),
    ):
        _is_openai_error(response, 403, "tenant_disabled")
    assert EndpointRequest.objects.count() == 0


# -- T3-12 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "support-bot@r²",
        "support-bot@r٣",  # an Arabic-Indic three
        "support-bot@r",
        "support-bot@",
        "support-bot@3",
        "support-bot@r-1",
        "support-bot@r 1",
        "support-bot@r1234567890",
        "support-bot@r" + "9" * 5000,
    ],
)
def test_a_malformed_revision_pin_is_a_400(org, project, model):
    make_endpoint(project)
    _, client = _key(org)

    response = _chat(client, model)

    _is_openai_error(response, 400, "invalid_request")
    assert response.json()["error"]["param"] == "model"


@pytest.mark.parametrize("model", ["support-bot@r9", "Support-Bot", "support\x00bot", "a" * 300])
def test_a_well_formed_pin_or_name_that_is_not_there_is_a_404(org, project, model):
    make_endpoint(project)
    _, client = _key(org)

    _is_openai_error(_chat(client, model), 404, "model_not_found")


@pytest.mark.parametrize("days", ["²", "٣", "0", "91", "-1", " 7", "7.0", "1" * 5000])
def test_usage_days_that_are_not_1_to_90_in_ascii_digits_are_a_400(org, project, days):
    endpoint = make_endpoint(project)
    _, client = _key(org)

    response = client.get(f"/api/v1/endpoints/{endpoint.public_id}/usage", {"days": days})

    _is_openai_error(response, 400, "invalid_request")
    assert response.json()["error"]["param"] == "days"
    ok = client.get(f"/api/v1/endpoints/{endpoint.public_id}/usage", {"days": "7"})
    assert ok.status_code == 200
