"""The CLI without a server: commands run in-process (`trainyard_cli.main.run`) against a
fake API answering through httpx's MockTransport, which records every request."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

from trainyard_cli import client as client_module
from trainyard_cli.main import run

URL = "https://trainyard.test"
KEY = "ty_abcd1234_s3cretvalue-never-printed"
WHOAMI = {
    "principal": "api_key",
    "organization": {"slug": "acme", "name": "Acme", "compute_enabled": True},
    "role": "member",
    "projects": [{"id": "proj_vision", "slug": "vision", "name": "Vision"}],
}

Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeApi:
    routes: list[tuple[str, re.Pattern[str], Handler]] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, answer: Handler | dict | list | int, status: int = 200):
        """Answer `method path` (a regex over the path) with JSON, a status, or a handler."""
        if callable(answer):
            handler = answer
        elif isinstance(answer, int):
            handler = lambda request, code=answer: httpx.Response(code)  # noqa: E731
        else:
            handler = lambda request, body=answer: httpx.Response(status, json=body)  # noqa: E731
        self.routes.insert(0, (method, re.compile(path + "$"), handler))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        for method, pattern, handler in self.routes:
            if method == request.method and pattern.match(request.url.path):
                return handler(request)
        return httpx.Response(
            404, json={"error": {"type": "not_found", "message": "Not found.", "param": None}}
        )

    def bodies(self, method: str, path: str) -> list[dict]:
        return [
            json.loads(r.content)
            for r in self.requests
            if r.method == method and r.url.path == path
        ]


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.on("GET", "/api/v1/whoami", WHOAMI)
    return fake


@pytest.fixture
def cli(api, monkeypatch, tmp_path):
    """Run a command line in-process; its exit code. Config comes from the environment
    (HOME and XDG_CONFIG_HOME point into tmp_path, so no real config is read)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("TRAINYARD_URL", URL)
    monkeypatch.setenv("TRAINYARD_API_KEY", KEY)
    monkeypatch.setattr(client_module, "RETRY_DELAY_S", 0)

    def invoke(*argv: str) -> int:
        return run(list(argv), transport=httpx.MockTransport(api))

    return invoke
