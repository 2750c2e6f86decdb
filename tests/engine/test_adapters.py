"""Adapters on the session's engine: /v1/models, upload, load, and unload while a stream is in
flight (it finishes; then the name is gone and its weights are deleted), and max_loras."""

from __future__ import annotations

import json

import httpx

from tests.adapters import PROMPT
from tests.engine.conftest import MAX_LORAS
from tests.live import wait_until

LONG = 480  # tokens: the tiny model's 512 positions less the prompt's


def _models(engine) -> dict[str, dict]:
    answer = httpx.get(f"{engine.url}/v1/models", headers=engine.headers).json()
    assert answer["object"] == "list"
    return {model["id"]: model for model in answer["data"]}


def test_models_lists_the_base_and_every_loaded_adapter(served, tiny_model):
    models = _models(served)

    assert list(models)[:3] == ["base", "a", "b"]
    assert models["base"] == {
        "id": "base",
        "object": "model",
        "created": models["base"]["created"],
        "owned_by": "trainyard",
        "root": str(tiny_model),
        "parent": None,
    }
    assert models["a"] == {
        "id": "a",
        "object": "model",
        "created": models["a"]["created"],
        "owned_by": "trainyard",
        "root": str(served.adapters_dir / "a"),
        "parent": "base",
    }
    assert isinstance(models["a"]["created"], int)


def test_an_upload_unpacks_into_the_adapters_dir(served, tiny_adapters, tmp_path):
    response = served.upload("fresh", tiny_adapters["b"], tmp_path)

    assert response.status_code == 200
    path = served.adapters_dir / "fresh"
    assert response.json() == {"lora_path": str(path)}
    assert (path / "adapter_config.json").read_bytes() == (
        tiny_adapters["b"] / "adapter_config.json"
    ).read_bytes()
    assert (path / "adapter_model.safetensors").is_file()
    # Again under the same name (a retried upload): replaced, still one directory.
    assert served.upload("fresh", tiny_adapters["a"], tmp_path).status_code == 200
    assert (path / "adapter_model.safetensors").read_bytes() == (
        tiny_adapters["a"] / "adapter_model.safetensors"
    ).read_bytes()


def test_a_loaded_name_cannot_be_loaded_or_uploaded_again(served, tiny_adapters, tmp_path):
    again = served.load("a", tiny_adapters["b"])
    upload = served.upload("a", tiny_adapters["b"], tmp_path)

    assert again.status_code == 400 and again.json()["error"]["type"] == "adapter_exists"
    assert upload.status_code == 400 and upload.json()["error"]["type"] == "adapter_exists"
    assert served.complete("a", PROMPT)["model"] == "a"


def test_unload_lets_the_stream_in_flight_finish_then_the_adapter_is_gone(
    served, tiny_adapters, tmp_path
):
    path = served.upload("ck", tiny_adapters["a_checkpoint"], tmp_path).json()["lora_path"]
    assert served.load("ck", path).json() == {"lora_name": "ck", "loaded": True}
    assert _models(served)["ck"]["root"] == path
    alone = served.complete("ck", PROMPT, max_tokens=LONG, ignore_eos=True)["choices"][0]["text"]
    body = {"model": "ck", "prompt": PROMPT, "max_tokens": LONG, "temperature": 0}
    with httpx.stream(
        "POST",
        f"{served.url}/v1/completions",
        json={
            **body,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers=served.headers,
        timeout=60,
    ) as stream:
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))

        unloaded = served.unload("ck")
        during = served.stats()["adapters"]
        refused = httpx.post(f"{served.url}/v1/completions", json=body, headers=served.headers)
        listed = _models(served)
        rest = [line[6:] for line in lines if line.startswith("data: ")]

    assert unloaded.status_code == 200 and unloaded.json() == {"lora_name": "ck", "unloaded": True}
    # The engine's own counter, not a stopwatch: the stream is still in flight after the
    # unload answered, so the unload did not wait for it.
    assert during["ck"] == {"in_flight": 1, "requests_total": 2}
    assert refused.status_code == 404 and refused.json()["error"]["type"] == "model_not_found"
    assert "ck" not in listed
    events = [json.loads(first[6:])] + [json.loads(event) for event in rest[:-1]]
    assert rest[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == alone
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["usage"]["completion_tokens"] == LONG
    wait_until(lambda: "ck" not in served.stats()["adapters"], what="ck's weights deleted")
    assert served.unload("ck").status_code == 404
    assert served.complete("a", PROMPT)["model"] == "a"  # the others are untouched


def test_loading_past_max_loras_is_refused_until_one_is_unloaded(served, tiny_adapters):
    resident = len(served.stats()["adapters"])
    extra = [f"spare-{index}" for index in range(MAX_LORAS - resident)]
    for name in extra:
        assert served.load(name, tiny_adapters["b"]).status_code == 200

    refused = served.load("one-too-many", tiny_adapters["b"])
    served.unload(extra[0])
    wait_until(lambda: extra[0] not in served.stats()["adapters"], what="a slot freed")
    accepted = served.load("one-too-many", tiny_adapters["b"])
    for name in [*extra[1:], "one-too-many"]:
        served.unload(name)

    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "too_many_adapters"
    assert accepted.status_code == 200
    wait_until(lambda: set(served.stats()["adapters"]) == {"a", "b"}, what="the spares gone")


def test_stats_count_requests_per_adapter(served):
    before = served.stats()
    served.complete("b", PROMPT, max_tokens=2)
    served.complete("b", PROMPT, max_tokens=2)
    served.complete("base", PROMPT, max_tokens=2)

    after = served.stats()
    assert after["requests_total"] == before["requests_total"] + 3
    assert after["generated_tokens_total"] == before["generated_tokens_total"] + 6
    assert after["adapters"]["b"] == {
        "in_flight": 0,
        "requests_total": before["adapters"]["b"]["requests_total"] + 2,
    }
    assert after["adapters"]["a"] == before["adapters"]["a"]
    assert after["requests_in_flight"] == 0
