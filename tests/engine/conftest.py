"""`python -m engine` as real processes on the tiny model, and a client for them.

One engine serves the whole session (`served`: the base plus the adapters `a` and `b` of
`tiny_adapters`, uploaded and loaded as the control plane does it); tests that need a process
of their own (signals, exit codes, the vLLM front) start one with `start_engine`. An engine
is ready when it prints its `serving` line: nothing here sleeps to wait for it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from runner.artifacts import pack_directory

REPO = Path(__file__).resolve().parents[2]
SECRET = "engine-test-secret"
START_TIMEOUT_S = 90
MAX_LORAS = 6


@dataclass
class Engine:
    process: subprocess.Popen
    secret: str
    adapters_dir: Path
    lines: list[str] = field(default_factory=list)
    port: int | None = None

    def __post_init__(self) -> None:
        self._ready = threading.Event()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.port is None and line.startswith("{"):
                data = json.loads(line)
                if data.get("type") == "serving":
                    self.port = data["port"]
                    self._ready.set()
        self._ready.set()  # the process ended before (or after) serving

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def wait_serving(self) -> Engine:
        assert self._ready.wait(START_TIMEOUT_S), "the engine did not start in time"
        assert self.port is not None, f"the engine exited:\n{self.stderr}"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=30, **kwargs)

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/trainyard/stats", headers=self.headers).json()

    def complete(self, model: str, prompt: str, **fields) -> dict:
        body = {"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0, **fields}
        response = httpx.post(
            f"{self.url}/v1/completions", json=body, headers=self.headers, timeout=60
        )
        assert response.status_code == 200, response.text
        return response.json()

    def upload(self, name: str, directory: Path, tmp_path: Path) -> httpx.Response:
        packed = pack_directory(directory, tmp_path / f"{name}.tar.gz")
        return httpx.put(
            f"{self.url}/trainyard/adapters/{name}",
            content=packed.path.read_bytes(),
            headers={**self.headers, "X-Trainyard-SHA256": packed.sha256},
            timeout=60,
        )

    def load(self, name: str, path: str | Path) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/load_lora_adapter",
            json={"lora_name": name, "lora_path": str(path)},
            headers=self.headers,
            timeout=60,
        )

    def unload(self, name: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/unload_lora_adapter", json={"lora_name": name}, headers=self.headers
        )

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def engine_env(secret: str | None = SECRET, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TRAINYARD_SERVE_SECRET", "DJANGO_SETTINGS_MODULE")
    }
    env.update({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    if secret is not None:
        env["TRAINYARD_SERVE_SECRET"] = secret
    env.update(extra)
    return env


def start_engine(
    config: dict, workdir: Path, *, secret: str | None = SECRET, env: dict | None = None
) -> Engine:
    """Start `python -m engine` in `workdir` (its adapters go to workdir/adapters); not yet
    waited for (`wait_serving`)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "engine", "--config-json", json.dumps(config)],
        cwd=workdir,
        env=env if env is not None else engine_env(secret),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Engine(process, secret or "", workdir / "adapters")


@pytest.fixture(scope="session")
def engine(tiny_model, tmp_path_factory) -> Iterator[Engine]:
    running = start_engine(
        {"base_model": str(tiny_model), "max_loras": MAX_LORAS},
        tmp_path_factory.mktemp("engine"),
    )
    try:
        yield running.wait_serving()
    finally:
        running.stop()


@pytest.fixture(scope="session")
def served(engine, tiny_adapters, tmp_path_factory) -> Engine:
    """The session's engine with `a` and `b` uploaded and loaded."""
    packs = tmp_path_factory.mktemp("packs")
    for name in ("a", "b"):
        uploaded = engine.upload(name, tiny_adapters[name], packs)
        assert uploaded.status_code == 200, uploaded.text
        loaded = engine.load(name, uploaded.json()["lora_path"])
        assert loaded.status_code == 200, loaded.text
    return engine


def sse(response: httpx.Response) -> list[str]:
    """The `data:` payloads of an event stream, in order."""
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
