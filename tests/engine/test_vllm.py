"""The vLLM path: the child's command line and environment, and the front forwarding to a
stand-in `vllm` executable (vLLM itself is not installed here) that speaks its HTTP."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.config import EngineConfig
from engine.vllm import vllm_command, vllm_env
from tests.engine.conftest import SECRET, engine_env, sse, start_engine
from tests.live import wait_until

# Answers as vLLM's OpenAI server does, for the calls the front forwards; records each call.
FAKE_VLLM = r"""#!PYTHON
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
record = os.environ["FAKE_VLLM_RECORD"]
with open(record + ".start", "w") as out:
    json.dump({"argv": args, "env": {k: v for k, v in os.environ.items() if "VLLM" in k}}, out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, data, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send(200, b"") if self.path == "/health" else self.send(404, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(record, "a") as out:
            out.write(json.dumps({"path": self.path, "body": body,
                                  "auth": self.headers.get("Authorization")}) + "\n")
        if self.headers.get("Authorization") != "Bearer " + os.environ["VLLM_API_KEY"]:
            return self.send(401, b'{"error": "Unauthorized"}')
        if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            return self.send(200, b"Success", "text/plain")
        text = "echo:" + body["model"] + ":" + body["prompt"]
        if not body.get("stream"):
            answer = {"id": "cmpl-fake", "object": "text_completion", "model": body["model"],
                      "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
            return self.send(200, json.dumps(answer).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in (text[:5], text[5:], None):
            event = {"id": "cmpl-fake", "choices": [{"index": 0, "text": piece}]}
            data = ("data: " + (json.dumps(event) if piece else "[DONE]") + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")


port = int(args[args.index("--port") + 1])
ThreadingHTTPServer((args[args.index("--host") + 1], port), Handler).serve_forever()
"""


def test_the_command_line_asks_for_runtime_lora_and_keeps_the_secret_off_it():
    config = EngineConfig.from_dict(
        {"base_model": "org/model", "max_loras": 3, "max_lora_rank": 32, "max_model_len": 4096}
    )

    argv = vllm_command(config, port=4321)
    env = vllm_env({"PATH": "/bin"}, secret="s3")

    assert argv == [
        "vllm", "serve", "org/model",
        "--served-model-name", "base",
        "--enable-lora", "--max-loras", "3", "--max-lora-rank", "32",
        "--max-num-seqs", "8", "--dtype", "float32",
        "--host", "127.0.0.1", "--port", "4321",
        "--max-model-len", "4096",
    ]  # fmt: skip
    assert env == {"PATH": "/bin", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_API_KEY": "s3"}


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    bin_dir = tmp_path_factory.mktemp("bin")
    fake = bin_dir / "vllm"
    fake.write_text(FAKE_VLLM.replace("PYTHON", sys.executable, 1))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    record = bin_dir / "calls.jsonl"
    env = engine_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_VLLM_RECORD=str(record)
    )
    engine = start_engine(
        {"base_model": "org/model", "backend": "vllm", "max_loras": 2},
        tmp_path_factory.mktemp("front"),
        env=env,
    )
    try:
        yield engine.wait_serving(), record
    finally:
        engine.stop()


def _calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def test_the_child_gets_the_command_line_and_environment(front):
    _, record = front
    started = json.loads(Path(f"{record}.start").read_text())

    assert started["argv"][:2] == ["serve", "org/model"]
    assert SECRET not in " ".join(started["argv"])
    assert started["env"]["VLLM_API_KEY"] == SECRET
    assert started["env"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_completions_are_forwarded_and_answered_byte_for_byte(front):
    engine, record = front
    body = {"model": "base", "prompt": "hi", "max_tokens": 4}

    answer = httpx.post(f"{engine.url}/v1/completions", json=body, headers=engine.headers)
    with httpx.stream(
        "POST",
        f"{engine.url}/v1/completions",
        json={**body, "stream": True},
        headers=engine.headers,
    ) as response:
        events = sse(response)
    refused = httpx.post(
        f"{engine.url}/v1/completions", json={**body, "top_p": 7}, headers=engine.headers
    )

    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "echo:base:hi"
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == "echo:base:hi"
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "top_p"
    calls = [call for call in _calls(record) if call["path"] == "/v1/completions"]
    assert [call["body"] for call in calls] == [body, {**body, "stream": True}]
    assert {call["auth"] for call in calls} == {f"Bearer {SECRET}"}


def test_adapters_load_and_unload_through_the_child(front, tmp_path):
    engine, record = front
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA"}')

    loaded = engine.load("ft-1", adapter)
    models = httpx.get(f"{engine.url}/v1/models", headers=engine.headers).json()["data"]
    answer = httpx.post(
        f"{engine.url}/v1/completions",
        json={"model": "ft-1", "prompt": "yo"},
        headers=engine.headers,
    ).json()
    unloaded = engine.unload("ft-1")
    wait_until(lambda: any(c["path"] == "/v1/unload_lora_adapter" for c in _calls(record)))

    assert loaded.status_code == 200 and unloaded.status_code == 200
    assert [model["id"] for model in models] == ["base", "ft-1"]
    assert answer["choices"][0]["text"] == "echo:ft-1:yo"
    lora_calls = [call for call in _calls(record) if "lora" in call["path"]]
    assert [(call["path"], call["body"]) for call in lora_calls] == [
        ("/v1/load_lora_adapter", {"lora_name": "ft-1", "lora_path": str(adapter)}),
        ("/v1/unload_lora_adapter", {"lora_name": "ft-1"}),
    ]


def test_sigint_stops_the_front_and_its_child(front):
    engine, _ = front
    child_pids = {int(pid) for pid in _children(engine.process.pid)}

    engine.signal(signal.SIGINT)
    signalled = time.monotonic()

    assert engine.process.wait(timeout=5) == 0
    assert time.monotonic() - signalled < 3
    assert child_pids and not any(_alive(pid) for pid in child_pids)


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status
