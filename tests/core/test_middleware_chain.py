"""The middleware chain under ASGI, as the web server runs it (Django's AsyncClient goes
through the ASGI handler): JSON errors under /api/ as with the sync client, and static files
served by `apps.core.static_files` in either mode, other paths passed on untouched."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import iscoroutinefunction
from django.http import HttpResponse
from django.test import AsyncClient, RequestFactory

from apps.core.middleware import ApiJsonErrorsMiddleware, SyncChainMiddleware
from apps.core.static_files import StaticFilesMiddleware

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.core.urls_errors"), pytest.mark.anyio]


async def test_under_asgi_an_unknown_api_path_is_a_json_404(async_client):
    response = await async_client.get("/api/v1/no-such-thing")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["type"] == "not_found"


async def test_under_asgi_a_crash_is_a_json_500():
    response = await AsyncClient(raise_request_exception=False).get("/api/boom")

    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal_error"
    assert "boom" not in response.content.decode()


async def test_under_asgi_a_refused_method_is_a_json_405_with_allow(async_client):
    response = await async_client.get("/api/post-only")

    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"
    assert response["Allow"] == "POST"


async def test_the_json_errors_middleware_works_in_async_mode_too():
    async def html_405(request):
        return HttpResponse("<h1>no</h1>", status=405, headers={"Allow": "POST"})

    middleware = ApiJsonErrorsMiddleware(html_405)
    answer = await middleware(RequestFactory().get("/api/x"))

    assert iscoroutinefunction(middleware)
    assert answer.status_code == 405 and answer["Allow"] == "POST"
    assert json.loads(answer.content)["error"]["type"] == "method_not_allowed"


def test_the_innermost_middleware_is_the_sync_only_one(settings):
    # Django runs every middleware above a sync-only one in sync mode under ASGI: the
    # request crosses to its thread once, not around each middleware.
    assert settings.MIDDLEWARE[-1] == "apps.core.middleware.SyncChainMiddleware"
    assert SyncChainMiddleware.async_capable is False


@pytest.fixture
def static_root(tmp_path, settings):
    (tmp_path / "css").mkdir()
    (tmp_path / "css" / "app.css").write_text("body { color: teal; }\n")
    settings.STATIC_ROOT = tmp_path
    settings.STATIC_URL = "/static/"
    settings.WHITENOISE_AUTOREFRESH = False
    settings.WHITENOISE_USE_FINDERS = False
    return tmp_path


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_a_static_file_is_served_and_other_paths_pass_on_in_sync_mode(static_root):
    middleware = StaticFilesMiddleware(lambda request: HttpResponse("from the view"))

    served = middleware(RequestFactory().get("/static/css/app.css"))
    passed = middleware(RequestFactory().get("/api/v1/compute/jobs"))

    assert served.status_code == 200
    assert _body(served) == b"body { color: teal; }\n"
    assert served["Content-Type"].startswith("text/css")
    assert passed.content == b"from the view"


async def test_a_static_file_is_served_and_other_paths_pass_on_in_async_mode(static_root):
    async def view(request):
        return HttpResponse("from the view")

    middleware = StaticFilesMiddleware(view)
    served = await middleware(RequestFactory().get("/static/css/app.css"))
    passed = await middleware(RequestFactory().get("/static/css/missing.css"))

    assert iscoroutinefunction(middleware)
    assert served.status_code == 200
    assert _body(served) == b"body { color: teal; }\n"  # WhiteNoise's file, read in chunks
    assert passed.content == b"from the view"
