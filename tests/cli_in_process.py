"""The `trainyard` command line run in the test's own process against the test's Django app:
each request the CLI makes goes through Django's test client, so the real CLI and the real
API code run inside the test's database transaction (no server, no fake answers).

`cli_transport` gives the CLI an API key of `org` and a HOME of its own, and is the
`transport=` to pass to `trainyard_cli.main.run`."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from apps.accounts import services as account_services
from trainyard_cli import client as cli_client

# Allowed in every test (Django's test environment adds it to ALLOWED_HOSTS); https, because
# the CLI sends a key over plain http only to this machine.
URL = "https://testserver"


@pytest.fixture
def cli_transport(org, monkeypatch, tmp_path) -> httpx.BaseTransport:
    _, key = account_services.api_key_create(organization=org, name="cli")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("TRAINYARD_URL", URL)
    monkeypatch.setenv("TRAINYARD_API_KEY", key)
    monkeypatch.setattr(cli_client, "RETRY_DELAY_S", 0)
    django = Client()

    def forward(request: httpx.Request) -> httpx.Response:
        answer = django.generic(
            request.method,
            request.url.raw_path.decode(),
            data=request.read(),
            content_type=request.headers.get("content-type", "application/json"),
            secure=True,
            headers={
                name: value
                for name, value in request.headers.items()
                if name.lower() in ("authorization", "idempotency-key", "accept")
            },
        )
        return httpx.Response(
            answer.status_code,
            headers={"content-type": answer.get("Content-Type", "application/json")},
            content=answer.content,
        )

    return httpx.MockTransport(forward)
