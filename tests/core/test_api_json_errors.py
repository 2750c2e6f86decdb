"""Every error under /api/ and /v1/ is the API's JSON shape, with DEBUG on or off."""

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.core.urls_errors")]


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def error_of(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.json()["error"]


@pytest.mark.usefixtures("debug")
@pytest.mark.parametrize("path", ["/api/v1/no-such-thing", "/v1/no-such-thing", "/api/"])
def test_an_unknown_path_is_a_json_404(client, path):
    response = client.get(path, HTTP_ACCEPT="application/json")
    assert response.status_code == 404
    assert error_of(response)["type"] == "not_found"


@pytest.mark.usefixtures("debug")
@pytest.mark.parametrize("path", ["/api/boom", "/v1/boom"])
def test_a_crash_is_a_json_500_that_tells_nothing_of_the_server(path):
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 500
    error = error_of(response)
    assert error["type"] == "internal_error"
    assert "boom" not in response.content.decode()


@pytest.mark.usefixtures("debug")
def test_a_method_a_plain_view_refuses_is_a_json_405_with_allow(client):
    response = client.get("/api/post-only")
    assert response.status_code == 405
    assert error_of(response)["type"] == "method_not_allowed"
    assert response["Allow"] == "POST"


@pytest.mark.usefixtures("debug")
def test_a_csrf_failure_is_a_json_403(member):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    response = client.post("/api/post-only")
    assert response.status_code == 403
    assert error_of(response)["type"] == "permission_denied"


def test_pages_keep_their_html_errors(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")
