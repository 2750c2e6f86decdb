"""Malformed input is the client's error: a 4xx in the API's error shape
`{"error": {"type", "message", "param"}}`, never a 500 or Django's HTML error page."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from django.http import JsonResponse
from django.test import Client
from django.urls import path

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, LogLine
from apps.jobs.states import JobState
from config import urls as config_urls
from tests.jobs.helpers import job_body, make_job

pytestmark = pytest.mark.django_db


def _error(response, status: int, error_type: str = "invalid_request") -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"type", "message", "param"}
    assert error["type"] == error_type
    return error


def _cursor(raw_json: str) -> str:
    return base64.urlsafe_b64encode(raw_json.encode()).decode().rstrip("=")


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


@pytest.fixture
def job(org) -> Job:
    return make_job(org)


class Runner:
    def __init__(self, job: Job, attempt: Attempt) -> None:
        self.job = job
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")

    def post(self, endpoint: str, body, **extra):
        data = body if isinstance(body, bytes | str) else None
        return self.client.post(
            f"/api/v1/runner/jobs/{self.job.public_id}/{endpoint}",
            data if data is not None else body,
            content_type="application/json",
            **extra,
        )


@pytest.fixture
def runner(job) -> Runner:
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Runner(Job.objects.get(pk=job.pk), attempt)


# -- cursors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '["2026-01-01T00:00:00+00:00", 1e400]',
        '["2026-01-01T00:00:00+00:00", -1e400]',
        '["2026-01-01T00:00:00+00:00", NaN]',
        '["2026-01-01T00:00:00+00:00", 1e300]',
        '["2026-01-01T00:00:00+00:00", 99999999999999999999999]',
        '["2026-01-01T00:00:00+00:00", true]',
        "[1e400, 1]",
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_a_bad_cursor_of_the_job_list_is_400(api, job, raw):
    error = _error(api.get("/api/v1/compute/jobs", {"cursor": _cursor(raw)}), 400)
    assert error["param"] == "cursor"


@pytest.mark.parametrize("raw", ["[1e400]", "[-1e400]", "[1e300]", "[9223372036854775808]"])
@pytest.mark.parametrize("what", ["logs", "events"])
def test_a_bad_id_cursor_is_400(api, job, raw, what):
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/{what}", {"cursor": _cursor(raw)})
    assert _error(response, 400)["param"] == "cursor"


def test_a_bad_cursor_of_the_secret_list_is_400(api):
    raw = '["2026-01-01T00:00:00+00:00", 1e400]'
    response = api.get("/api/v1/compute/secrets", {"cursor": _cursor(raw)})
    assert _error(response, 400)["param"] == "cursor"


def test_a_good_cursor_still_pages(api, org):
    for index in range(3):
        make_job(org, name=f"job-{index}")
    first = api.get("/api/v1/compute/jobs", {"limit": 2}).json()
    second = api.get("/api/v1/compute/jobs", {"limit": 2, "cursor": first["next_cursor"]})
    assert second.status_code == 200
    assert len(second.json()["data"]) == 1


# -- deeply nested bodies ---------------------------------------------------------------

DEEP = "[" * 100_000


def test_a_deeply_nested_body_to_the_api_is_400(api, job):
    response = api.post(
        "/api/v1/compute/jobs", DEEP, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    _error(response, 400)
    assert Job.objects.count() == 1


def test_a_body_nested_just_too_deep_to_handle_is_400(api, job):
    # Readable, but nested nearly to the recursion limit: what handles it may hit it.
    deep = '{"name": "x", "container": {"env": ' + "[" * 990 + "]" * 990 + "}}"
    response = api.post(
        "/api/v1/compute/jobs", deep, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    _error(response, 400)
    assert Job.objects.count() == 1


@pytest.mark.parametrize("endpoint", ["logs", "started", "exit"])
def test_a_deeply_nested_body_to_the_runner_is_400(runner, endpoint):
    _error(runner.post(endpoint, DEEP), 400)


# -- artifact ids -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "artifact_id",
    # "²" and U+0661 (Arabic-Indic one) are digits to str.isdigit, not in an id.
    ["art_²", "art_\u0661", "art_1²", "art_99999999999999999999999", "art_-1", "art_", "7"],
)
def test_a_malformed_artifact_id_is_400(api, job, artifact_id):
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/artifacts/{artifact_id}/download")
    assert _error(response, 400)["param"] == "artifact_id"


def test_a_well_formed_unknown_artifact_id_is_still_404(api, job):
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/artifacts/art_999999/download")
    _error(response, 404, "not_found")


# -- numbers the database cannot hold ---------------------------------------------------


@pytest.mark.parametrize("code", [2**31, -(2**31) - 1, 2**64, 10**400])
def test_an_exit_code_out_of_range_is_400(runner, code):
    body = f'{{"exit_code": {code}, "last_seq": 0}}'
    assert _error(runner.post("exit", body), 400)["param"] == "exit_code"
    assert Job.objects.get(pk=runner.job.pk).state == JobState.PROVISIONING


@pytest.mark.parametrize("seq", [2**31, 2**63, 10**400])
def test_a_seq_out_of_range_is_400(runner, seq):
    ts = datetime.now(UTC).isoformat()
    body = f'{{"lines": [{{"seq": {seq}, "ts": "{ts}", "message": "x"}}]}}'
    assert _error(runner.post("logs", body), 400)["param"] == "lines[0].seq"
    assert not LogLine.objects.filter(job=runner.job, source="user").exists()


def test_the_largest_seq_and_exit_code_are_fine(runner):
    ts = datetime.now(UTC).isoformat()
    line = {"seq": 2**31 - 1, "ts": ts, "message": "last"}
    assert runner.post("logs", {"lines": [line]}).json() == {
        "accepted": 1,
        "duplicates": 0,
        "order": "continue",
    }
    assert runner.post("exit", {"exit_code": -(2**31), "last_seq": 0}).status_code == 200


@pytest.mark.parametrize("step", [2**31, 10**400])
def test_resumed_from_step_out_of_range_is_400(runner, step):
    body = f'{{"pid": 1, "resumed_from_step": {step}}}'
    assert _error(runner.post("started", body), 400)["param"] == "resumed_from_step"


# -- bodies over DATA_UPLOAD_MAX_MEMORY_SIZE --------------------------------------------


def test_an_oversize_body_to_the_api_is_413_in_the_error_shape(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = job_body(name="x" * 2000)
    response = api.post(
        "/api/v1/compute/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="oversize"
    )
    _error(response, 413, "payload_too_large")
    assert not Job.objects.exists()


def test_an_oversize_body_to_the_runner_is_413_in_the_error_shape(runner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    ts = datetime.now(UTC).isoformat()
    body = {"lines": [{"seq": 1, "ts": ts, "message": "x" * 2000}]}
    _error(runner.post("logs", body), 413, "payload_too_large")
    assert not LogLine.objects.filter(job=runner.job, source="user").exists()


# -- Django's own 400 under /api/ (a plain view reading an oversize body) ----------------


def _reads_its_body(request):
    return JsonResponse({"size": len(request.body)})


urlpatterns = [*config_urls.urlpatterns, path("api/v1/test-raw-body", _reads_its_body)]
handler400 = "apps.core.api_errors.handler400"
handler404 = config_urls.handler404
handler500 = config_urls.handler500


@pytest.mark.urls(__name__)
def test_an_oversize_body_to_a_plain_api_view_is_413_with_handler400(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = Client().post("/api/v1/test-raw-body", "x" * 2000, content_type="text/plain")
    _error(response, 413, "payload_too_large")
    assert Client().post("/api/v1/test-raw-body", "x" * 10, content_type="text/plain").json() == {
        "size": 10
    }


@pytest.mark.parametrize("ts", ["9999-12-31T23:59:59.999999-23:59", "0001-01-01T00:00:00+23:59"])
def test_a_timestamp_at_the_edge_of_the_calendar_is_stored(runner, ts):
    body = {"lines": [{"seq": 1, "ts": ts, "message": "edge"}]}
    assert runner.post("logs", body).status_code == 200
    assert LogLine.objects.filter(job=runner.job, seq=1, message="edge").exists()
