"""Whatever a client sends to the OpenAI-compatible path (`/v1/…`) — any method, key, body
or `model` — and whatever `days` it asks the usage of, the answer is an answer (a listing,
or the API's error shape with a 4xx or the 503 of an endpoint not loaded yet), never a 500.
An endpoint exists whose engine never started, so every lookup runs to its end."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts import services as account_services
from tests.serving.test_proxy_guards import make_endpoint

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/models"]
NAME = "support-bot"

latin1 = st.text(alphabet=st.characters(max_codepoint=255), max_size=80)
digits = st.text(alphabet=st.characters(categories=["Nd", "No"]), max_size=12)
models = st.one_of(
    st.text(max_size=80),
    st.sampled_from([NAME, f"{NAME}@r1", f"{NAME}@r2", "other"]),
    st.builds(lambda pin: f"{NAME}@{pin}", st.text(max_size=20)),
    st.builds(lambda number: f"{NAME}@r{number}", digits),
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.builds(
        lambda model, extra: json.dumps({**extra, "model": model}).encode(),
        models,
        st.dictionaries(
            st.sampled_from(["messages", "prompt", "stream", "stream_options", "max_tokens"]),
            json_values,
            max_size=4,
        ),
    ),
)


def _answered(response) -> None:
    assert response.status_code < 500 or response.status_code == 503, response.content[:300]
    body = response.json()
    if response.status_code >= 400:
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"type", "message", "param"}, body
        assert isinstance(body["error"]["type"], str) and body["error"]["type"]
    if response.status_code == 503:
        assert body["error"]["type"] == "endpoint_not_ready"


def test_the_openai_path_answers_any_request_without_a_500(org, project, settings):
    settings.API_REQUESTS_PER_MINUTE = 100_000
    make_endpoint(project, NAME)
    _, key = account_services.api_key_create(organization=org, name="fuzz")
    client = Client()

    @FUZZ
    @given(
        path=st.sampled_from(PATHS),
        method=st.sampled_from(["GET", "POST", "POST", "POST", "PUT", "DELETE"]),
        authorization=st.one_of(
            st.just(f"Bearer {key}"),
            st.just(f"Bearer {key}"),
            st.none(),
            latin1,
            latin1.map(lambda raw: f"Bearer {raw}"),
        ),
        body=bodies,
    )
    def check(path, method, authorization, body):
        headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
        response = client.generic(method, path, body, content_type="application/json", **headers)
        _answered(response)

    check()


def test_any_model_is_answered_without_a_500(org, project, settings):
    settings.API_REQUESTS_PER_MINUTE = 100_000
    make_endpoint(project, NAME)
    _, key = account_services.api_key_create(organization=org, name="fuzz")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    @FUZZ
    @given(path=st.sampled_from(PATHS[:2]), model=models)
    def check(path, model):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
        _answered(client.post(path, body, content_type="application/json"))

    check()


def test_usage_days_of_any_text_are_a_listing_or_a_400(org, project, api_client_for):
    endpoint = make_endpoint(project, NAME)
    api = api_client_for(org)
    url = f"/api/v1/endpoints/{endpoint.public_id}/usage"

    @FUZZ
    @given(days=st.one_of(st.text(max_size=12), digits, st.integers().map(str)))
    def check(days):
        response = api.get(url, {"days": days})
        assert response.status_code in {200, 400}, response.content[:300]
        if response.status_code == 400:
            assert response.json()["error"] == {
                "type": "invalid_request",
                "message": response.json()["error"]["message"],
                "param": "days",
            }

    check()
