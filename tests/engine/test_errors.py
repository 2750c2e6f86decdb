"""The secret on every path, and every kind of bad request answered in the one error shape:
never a 500, never a dropped connection (except after a body too large to read)."""

from __future__ import annotations

import io
import json
import socket
import tarfile

import httpx
import pytest

ROUTES = [
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
    ("PUT", "/trainyard/adapters/intruder"),
    ("GET", "/trainyard/stats"),
    ("GET", "/no/such/path"),
]
BODY = b'{"model": "base", "prompt": "hi", "max_tokens": 2}'


def _error(response: httpx.Response, status: int, error_type: str, param=None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"type", "message", "param", "code"}
    assert error["type"] == error_type and error["param"] == param and error["code"] is None
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-secret",
        "Bearer engine-test-secret-and-more",
        "Bearer",
        "Basic ZW5naW5lLXRlc3Qtc2VjcmV0",
        "engine-test-secret",
    ],
)
def test_every_path_refuses_a_request_without_the_secret(engine, authorization):
    before = engine.stats()
    headers = {"Authorization": authorization} if authorization else {}
    with httpx.Client(base_url=engine.url, headers=headers) as client:
        for method, path in ROUTES:
            response = client.request(method, path, content=BODY)
            _error(response, 401, "unauthorized")
            assert response.headers["www-authenticate"] == "Bearer"

    after = engine.stats()
    assert after["requests_total"] == before["requests_total"]
    assert not (engine.adapters_dir / "intruder").exists()


def test_the_secret_opens_health(engine):
    response = httpx.get(f"{engine.url}/health", headers=engine.headers)

    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "hi"}, "model"),
        ({"model": 3, "prompt": "hi"}, "model"),
        ({"model": "base"}, "prompt"),
        ({"model": "base", "prompt": ["one", "two"]}, "prompt"),
        ({"model": "base", "prompt": [1, 2]}, "prompt"),
        ({"model": "base", "prompt": "hi", "max_tokens": "5"}, "max_tokens"),
        ({"model": "base", "prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"model": "base", "prompt": "hi", "max_tokens": 513}, "max_tokens"),
        ({"model": "base", "prompt": "hi", "max_tokens": True}, "max_tokens"),
        ({"model": "base", "prompt": "hi", "temperature": -0.1}, "temperature"),
        ({"model": "base", "prompt": "hi", "temperature": "hot"}, "temperature"),
        ({"model": "base", "prompt": "hi", "top_p": 0}, "top_p"),
        ({"model": "base", "prompt": "hi", "top_p": 1.5}, "top_p"),
        ({"model": "base", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "base", "prompt": "hi", "stop": [""]}, "stop"),
        ({"model": "base", "prompt": "hi", "stop": 7}, "stop"),
        ({"model": "base", "prompt": "hi", "seed": "x"}, "seed"),
        ({"model": "base", "prompt": "hi", "seed": 2**64}, "seed"),
        ({"model": "base", "prompt": "hi", "n": 2}, "n"),
        ({"model": "base", "prompt": "hi", "stream": "yes"}, "stream"),
        ({"model": "base", "prompt": "hi", "stream_options": []}, "stream_options"),
        (
            {"model": "base", "prompt": "hi", "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
        ),
        ({"model": "base", "prompt": "hi", "logprobs": 2}, "logprobs"),
        ({"model": "base", "prompt": "word " * 600, "max_tokens": 16}, "prompt"),
        ({"model": "base", "prompt": "word " * 250, "max_tokens": 500}, "prompt"),
    ],
)
def test_a_bad_completion_field_is_400_naming_it(engine, body, param):
    response = httpx.post(f"{engine.url}/v1/completions", json=body, headers=engine.headers)

    _error(response, 400, "invalid_request", param)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hello", "messages"),
        (["hello"], "messages[0]"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": "x"}, {"role": "user", "content": 5}], "messages[1].content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
    ],
)
def test_a_bad_chat_is_400_naming_the_message(engine, messages, param):
    response = httpx.post(
        f"{engine.url}/v1/chat/completions",
        json={"model": "base", "messages": messages},
        headers=engine.headers,
    )

    _error(response, 400, "invalid_request", param)


@pytest.mark.parametrize(
    "content", [b"{not json", b"", b"[1, 2]", b'"text"', b'{"model": NaN}', b"\xff\xfe{"]
)
def test_a_body_that_is_not_a_json_object_is_400_and_the_connection_lives_on(engine, content):
    with engine.client() as client:
        response = client.post("/v1/completions", content=content)
        _error(response, 400, "invalid_request")
        assert client.get("/health").status_code == 200  # the same keep-alive connection


def test_an_unknown_model_is_404(engine):
    for path, extra in (
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        response = httpx.post(
            f"{engine.url}{path}", json={"model": "nope", **extra}, headers=engine.headers
        )
        _error(response, 404, "model_not_found", "model")


def test_an_unknown_path_is_404_and_a_wrong_method_405(engine):
    with engine.client() as client:
        _error(client.get("/v1/nothing"), 404, "not_found")
        wrong = client.get("/v1/completions")
        _error(wrong, 405, "method_not_allowed")
        assert wrong.headers["allow"] == "POST"
        _error(client.delete("/v1/models"), 405, "method_not_allowed")
        _error(client.post("/trainyard/adapters/x", content=b"{}"), 405, "method_not_allowed")


def _raw(engine, request: bytes) -> tuple[bytes, bytes]:
    """Send `request` on a fresh socket; the answer's head, and its body once closed."""
    with socket.create_connection(("127.0.0.1", engine.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize(
    ("path", "method", "length"),
    [
        ("/v1/completions", "POST", 2 * 1024 * 1024),
        ("/v1/load_lora_adapter", "POST", 1024 * 1024 + 1),
        ("/trainyard/adapters/huge", "PUT", 600 * 1024 * 1024),
    ],
)
def test_a_body_over_the_cap_is_413_before_it_is_read(engine, path, method, length):
    head, body = _raw(
        engine,
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {engine.secret}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode(),
    )

    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in head
    assert b'"type": "payload_too_large"' in body
    assert not (engine.adapters_dir / "huge").exists()


def test_a_malformed_request_is_answered_in_the_error_shape(engine):
    # A request line http.server cannot read is answered HTTP/0.9 style: the body alone.
    with socket.create_connection(("127.0.0.1", engine.port), timeout=10) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        answer = sock.recv(65536)
    too_many = "".join(f"X-Header-{i}: {i}\r\n" for i in range(120))
    head, body = _raw(engine, f"GET /health HTTP/1.1\r\n{too_many}\r\n".encode())

    assert json.loads(answer)["error"]["type"] == "invalid_request"
    assert head.startswith(b"HTTP/1.1 431 ")
    assert json.loads(body)["error"]["type"] == "invalid_request"


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_uploads_that_cannot_be_an_adapter_are_400_and_leave_nothing(engine, tmp_path):
    cases = [
        ("bad-sum", _tar({"adapter_config.json": b"{}"}), {"X-Trainyard-SHA256": "0" * 64}),
        ("bad-hex", _tar({"adapter_config.json": b"{}"}), {"X-Trainyard-SHA256": "xyz"}),
        ("escape", _tar({"../escaped.json": b"{}", "adapter_config.json": b"{}"}), {}),
        ("absolute", _tar({"/tmp/absolute.json": b"{}"}), {}),
        ("no-config", _tar({"adapter_model.safetensors": b"x"}), {}),
        ("not-gzip", b"plain bytes", {}),
    ]
    with engine.client() as client:
        for name, content, headers in cases:
            response = client.put(f"/trainyard/adapters/{name}", content=content, headers=headers)
            expected = "checksum_mismatch" if name == "bad-sum" else "invalid_request"
            _error(response, 400, expected)
        _error(client.put("/trainyard/adapters/a%2Fb", content=b""), 400, "invalid_request", "name")
        dots = client.put("/trainyard/adapters/%2E%2E", content=b"")
        _error(dots, 400, "invalid_request", "name")

    left = sorted(path.name for path in engine.adapters_dir.iterdir())
    assert not any(name in left for name, _, _ in cases), left
    assert not any(name.startswith(".") for name in left), left
    assert not (engine.adapters_dir.parent / "escaped.json").exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"lora_name": "x"}, "lora_path"),
        ({"lora_path": "/tmp"}, "lora_name"),
        ({"lora_name": "no/slash", "lora_path": "/tmp"}, "lora_name"),
        ({"lora_name": "__base__", "lora_path": "/tmp"}, "lora_name"),
        ({"lora_name": "base", "lora_path": "/tmp"}, "lora_name"),
        ({"lora_name": "x", "lora_path": "/no/such/adapter"}, "lora_path"),
    ],
)
def test_a_load_that_cannot_work_is_400_and_changes_nothing(engine, body, param):
    before = httpx.get(f"{engine.url}/v1/models", headers=engine.headers).json()

    response = httpx.post(f"{engine.url}/v1/load_lora_adapter", json=body, headers=engine.headers)

    _error(response, 400, "invalid_request", param)
    assert httpx.get(f"{engine.url}/v1/models", headers=engine.headers).json() == before


def test_unloading_a_name_that_is_not_loaded_is_404(engine):
    response = httpx.post(
        f"{engine.url}/v1/unload_lora_adapter", json={"lora_name": "ghost"}, headers=engine.headers
    )

    _error(response, 404, "model_not_found", "model")
