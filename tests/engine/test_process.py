"""The engine as a process: what it prints, its exit codes, stop signals with a stream in
flight, and the base model restored once its last adapter is gone."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.adapters import PROMPT
from tests.engine.conftest import REPO, engine_env, start_engine
from tests.live import wait_until


@pytest.fixture(scope="module")
def fresh(tiny_model, tmp_path_factory):
    """Two engines of this module's own, started together, with no adapters."""
    engines = [
        start_engine({"base_model": str(tiny_model)}, tmp_path_factory.mktemp(f"fresh{i}"))
        for i in range(2)
    ]
    try:
        yield [engine.wait_serving() for engine in engines]
    finally:
        for engine in engines:
            engine.stop()


def _run(config: dict, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", "--config-json", json.dumps(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_it_prints_one_serving_line_then_a_line_per_request(fresh):
    engine = fresh[0]
    httpx.get(f"{engine.url}/health", headers=engine.headers)

    serving = [line for line in engine.lines if line.startswith("{")]
    assert serving == [json.dumps({"type": "serving", "port": engine.port, "models": ["base"]})]
    wait_until(lambda: any(" /health " in line for line in engine.lines), what="the log line")
    [logged] = [line for line in engine.lines if " /health " in line]
    method, path, status, took = logged.removeprefix("engine: ").split(" ")
    assert (method, path, status) == ("GET", "/health", "200") and took.endswith("ms")


def test_the_base_is_the_same_before_and_after_its_only_adapter(fresh, tiny_adapters):
    engine = fresh[0]
    base = engine.complete("base", PROMPT)["choices"][0]["text"]

    assert engine.load("only", tiny_adapters["a"]).status_code == 200
    adapted = engine.complete("only", PROMPT)["choices"][0]["text"]
    assert engine.complete("base", PROMPT)["choices"][0]["text"] == base
    engine.unload("only")
    wait_until(lambda: not engine.stats()["adapters"], what="the adapter's weights deleted")
    assert engine.complete("base", PROMPT)["choices"][0]["text"] == base
    assert engine.load("again", tiny_adapters["a"]).status_code == 200

    assert adapted != base
    assert engine.complete("again", PROMPT)["choices"][0]["text"] == adapted
    assert engine.complete("base", PROMPT)["choices"][0]["text"] == base


def test_sigterm_ends_the_stream_in_flight_and_exits_0(fresh):
    engine = fresh[0]
    with httpx.stream(
        "POST",
        f"{engine.url}/v1/completions",
        json={
            "model": "base",
            "prompt": "x",
            "max_tokens": 500,
            "ignore_eos": True,
            "stream": True,
        },
        headers=engine.headers,
        timeout=30,
    ) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        engine.signal(signal.SIGTERM)
        signalled = time.monotonic()
        rest = [line[6:] for line in lines if line.startswith("data: ")]

    assert engine.process.wait(timeout=5) == 0
    assert time.monotonic() - signalled < 2.5
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["error"]["type"] == "shutting_down"
    assert engine.lines[-1] == "engine: stopped"


def test_sigusr1_stops_it_too(fresh):
    engine = fresh[1]
    engine.signal(signal.SIGUSR1)
    signalled = time.monotonic()

    assert engine.process.wait(timeout=5) == 0
    assert time.monotonic() - signalled < 2
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{engine.url}/health", headers=engine.headers)


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_it_refuses_to_start_without_a_secret(tiny_model, secret):
    result = _run({"base_model": str(tiny_model)}, engine_env(secret))

    assert result.returncode == 2
    assert "TRAINYARD_SERVE_SECRET" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({}, "'base_model' is required"),
        ({"base_model": "m", "max_batch": 0}, "'max_batch'"),
        ({"base_model": "m", "served_model_name": "__base__"}, "'served_model_name'"),
        ({"base_model": "m", "dtype": "int3"}, "'dtype'"),
        ({"base_model": "m", "colour": "blue"}, "unknown key(s): colour"),
    ],
)
def test_a_bad_config_exits_2_naming_the_problem(config, says):
    result = _run(config, engine_env())

    assert result.returncode == 2
    assert says in result.stderr


def test_a_port_in_use_exits_2(served, tiny_model):
    result = _run({"base_model": str(tiny_model), "port": served.port}, engine_env())

    assert result.returncode == 2
    assert "cannot listen" in result.stderr
