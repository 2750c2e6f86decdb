"""Endpoints through the whole system: the API creates an endpoint, a real serve job runs the
engine on the local provider, the worker loads the revision, and clients talk to it through
Trainyard's OpenAI-compatible API — with the official `openai` package, under load while the
target flips, and hanging up mid-stream."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import httpx
import openai
import pytest

from apps.jobs.models import Attempt, Job
from apps.serving.kind import engine_secret
from apps.serving.models import Endpoint, EndpointRequest
from tests.integration.stack import wait_for
from tests.integration.test_hub_run import hub_repo_with_files

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PROMPT = [{"role": "user", "content": "Reverse the letters: a b c"}]


def _create(api, project, tiny_model, target, name="support-bot") -> dict:
    response = api.session.post(
        f"{api.base}/api/v1/endpoints",
        json={
            "name": name,
            "project": project.public_id,
            "base_model": str(tiny_model),
            "target": target,
        },
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()


def _endpoint(api, endpoint_id: str) -> dict:
    return api.session.get(f"{api.base}/api/v1/endpoints/{endpoint_id}", timeout=10).json()


def _wait_current(api, endpoint_id: str, label: str, timeout: float = 90) -> dict:
    return wait_for(
        lambda: (
            (body := _endpoint(api, endpoint_id))["state"] == "ready"
            and body["current_revision"]["label"] == label
            and body
        ),
        timeout=timeout,
        what=f"{endpoint_id} to serve {label}",
    )


def _engine(endpoint_id: str) -> tuple[str, str]:
    """The engine's own URL and secret (what only the control plane knows)."""
    job = Endpoint.objects.get(public_id=endpoint_id).job
    attempt = Attempt.objects.get(job=job, number=job.attempt_count)
    return f"http://127.0.0.1:{attempt.service_port}", engine_secret(attempt)


def _sse(response: httpx.Response) -> list[str]:
    return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


def test_the_openai_sdk_talks_to_an_endpoint_and_usage_is_counted_per_key(
    api, serving_project, tuned, tiny_model, tiny_adapters, live_stack, api_key, compute_org
):
    created = _create(api, serving_project, tiny_model, {"job": tuned["a"].job.public_id})
    endpoint_id = created["id"]
    assert created["state"] == "starting"
    _wait_current(api, endpoint_id, "r1")
    client = openai.OpenAI(base_url=f"{live_stack.url}/v1", api_key=api_key, max_retries=0)

    raw = client.chat.completions.with_raw_response.create(
        model="support-bot", messages=PROMPT, max_tokens=8, temperature=0
    )
    assert raw.headers["X-Trainyard-Revision"] == "r1"
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens > 0 and answer.usage.prompt_tokens > 0

    chunks = list(
        client.chat.completions.create(
            model="support-bot",
            messages=PROMPT,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == answer.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == answer.usage.completion_tokens
    completion = client.completions.create(
        model="support-bot@r1", prompt="Hello", max_tokens=4, temperature=0
    )
    assert completion.choices[0].text is not None

    # On the wire: events as produced, the usage chunk last, then [DONE].
    with httpx.stream(
        "POST",
        f"{live_stack.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key}"},
        json={
            "model": "support-bot",
            "messages": PROMPT,
            "max_tokens": 8,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=30,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["X-Trainyard-Revision"] == "r1"
        events = _sse(response)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["usage"]["completion_tokens"] > 0
    # Without include_usage the client gets no usage chunk, but usage is still recorded.
    with httpx.stream(
        "POST",
        f"{live_stack.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": "support-bot", "messages": PROMPT, "max_tokens": 4, "stream": True},
        timeout=30,
    ) as response:
        plain = _sse(response)
    assert plain[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in plain[:-1])

    # The engine itself refuses a caller without its secret, even on loopback.
    engine_url, secret = _engine(endpoint_id)
    assert httpx.get(f"{engine_url}/v1/models", timeout=5).status_code == 401
    assert (
        httpx.get(f"{engine_url}/v1/models", headers={"Authorization": "Bearer x"}).status_code
        == 401
    )

    # A client that hangs up mid-stream stops the generation within a second.
    stats = lambda: httpx.get(  # noqa: E731
        f"{engine_url}/trainyard/stats", headers={"Authorization": f"Bearer {secret}"}
    ).json()
    before = stats()
    with httpx.stream(
        "POST",
        f"{live_stack.url}/v1/completions",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": "support-bot", "prompt": "Once", "max_tokens": 400, "stream": True},
        timeout=30,
    ) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
    hung_up = time.monotonic()
    wait_for(
        lambda: stats()["cancelled_total"] == before["cancelled_total"] + 1,
        timeout=1.0,
        what="the engine to see the hang-up",
    )
    assert time.monotonic() - hung_up < 1.0
    settled = stats()["generated_tokens_total"]
    time.sleep(0.5)  # long enough for a generation that went on to show
    assert stats()["generated_tokens_total"] == settled
    assert settled - before["generated_tokens_total"] < 400

    # Usage by key and day: every request above, with its tokens.
    usage = api.session.get(f"{api.base}/api/v1/endpoints/{endpoint_id}/usage").json()["data"]
    rows = {row["key"]: row for row in usage}
    key_prefix = "_".join(api_key.split("_")[:2])
    mine = rows[key_prefix]
    assert mine["requests"] == 6
    recorded = EndpointRequest.objects.filter(
        endpoint__public_id=endpoint_id, api_key__isnull=False
    )
    assert mine["completion_tokens"] == sum(r.completion_tokens for r in recorded)
    assert mine["completion_tokens"] > 0 and mine["errors"] == 0
    assert mine["latency_p50_ms"] is not None
    assert recorded.filter(cancelled=True).count() == 1

    # The target may be an adapter in the organization's hub: pushed there, served as r2.
    files = {p.name: p.read_bytes() for p in tiny_adapters["b"].iterdir() if p.is_file()}
    hub_repo_with_files(live_stack, compute_org, "support-lora", files)
    swapped = api.session.put(
        f"{api.base}/api/v1/endpoints/{endpoint_id}/target",
        json={"target": {"hub": f"{compute_org.slug}/support-lora"}},
        timeout=10,
    )
    assert swapped.status_code == 202, swapped.text
    served = _wait_current(api, endpoint_id, "r2")
    assert served["current_revision"]["hub"]["revision"] == f"{compute_org.slug}/support-lora@main"
    raw = client.chat.completions.with_raw_response.create(
        model="support-bot", messages=PROMPT, max_tokens=8, temperature=0
    )
    assert raw.headers["X-Trainyard-Revision"] == "r2"
    assert raw.parse().choices[0].message.content

    # Its minutes are a service's in the usage report.
    stopped = api.session.post(f"{api.base}/api/v1/endpoints/{endpoint_id}/stop").json()
    assert stopped["state"] == "stopped"
    job_id = created["job_id"]
    api.wait_state(job_id, "terminated", timeout=60)
    report = api.session.get(f"{api.base}/api/v1/compute/usage").json()
    assert report["summary"]["service_usd"] > 0
    service = [row for row in report["data"] if row["resource_type"] == "service"]
    assert [row["resource_id"] for row in service] == [endpoint_id]
    gone = client.chat.completions.with_raw_response
    with pytest.raises(openai.APIStatusError) as refused:
        gone.create(model="support-bot", messages=PROMPT, max_tokens=2)
    assert refused.value.status_code == 409


def test_a_swap_under_load_loses_nothing_and_each_answer_matches_its_revision(
    api, serving_project, tuned, tiny_model, live_stack, api_key
):
    """Four clients stream requests for as long as the target flips between two adapters
    (six times): every stream completes, each answer's revision header matches its greedy
    output, and a request that starts after a flip was seen is served by it or later."""
    endpoint_id = _create(api, serving_project, tiny_model, {"job": tuned["a"].job.public_id})["id"]
    _wait_current(api, endpoint_id, "r1")
    artifact_of = {1: "a"}

    def ask() -> tuple[str, str, float]:
        started = time.monotonic()
        with httpx.stream(
            "POST",
            f"{live_stack.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {api_key}"},
            json={
                "model": "support-bot",
                "messages": PROMPT,
                "max_tokens": 6,
                "temperature": 0,
                "stream": True,
            },
            timeout=60,
        ) as response:
            assert response.status_code == 200, response.read()
            events = _sse(response)
            revision = response.headers["X-Trainyard-Revision"]
        assert events[-1] == "[DONE]", events
        chunks = [json.loads(event) for event in events[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        return revision, text, started

    oracle = {"a": ask()[1]}
    targets = {"a": tuned["a"].job.public_id, "b": tuned["b"].job.public_id}
    flips: list[tuple[float, int]] = []  # (when the flip was seen, revision number)

    def flip() -> None:
        for number in range(2, 8):
            name = "b" if number % 2 == 0 else "a"
            response = api.session.put(
                f"{api.base}/api/v1/endpoints/{endpoint_id}/target",
                json={"target": {"job": targets[name]}},
                timeout=10,
            )
            assert response.status_code == 202, response.text
            artifact_of[number] = name
            _wait_current(api, endpoint_id, f"r{number}", timeout=60)
            flips.append((time.monotonic(), number))
            if name not in oracle:
                oracle[name] = ask()[1]

    results: list[tuple[str, str, float]] = []
    errors: list[BaseException] = []

    def client() -> None:
        try:
            asked = 0
            while flipper.is_alive() or asked < 5:
                results.append(ask())
                asked += 1
        except BaseException as exc:
            errors.append(exc)

    flipper = threading.Thread(target=flip)
    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in [flipper, *clients]:
        thread.start()
    for thread in [flipper, *clients]:
        thread.join(timeout=240)
    assert not errors, errors[:3]
    assert len(results) >= 20
    assert [number for _, number in flips] == list(range(2, 8))
    assert oracle["a"] != oracle["b"]

    for revision, text, started in results:
        number = int(revision.removeprefix("r"))
        assert text == oracle[artifact_of[number]], (revision, text)
        seen = [n for at, n in flips if at < started]
        assert number >= (seen[-1] if seen else 1), (revision, started)
    served = Counter(revision for revision, _, _ in results)
    assert len(served) > 2, served  # the load really overlapped the flips
    # The previous revision stays loaded for a rollback; older ones were unloaded.
    engine_url, secret = _engine(endpoint_id)
    loaded = httpx.get(
        f"{engine_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}
    ).json()
    assert sorted(m["id"] for m in loaded["data"]) == ["base", "support-bot-r6", "support-bot-r7"]
    rolled = api.session.post(f"{api.base}/api/v1/endpoints/{endpoint_id}/rollback").json()
    assert rolled["current_revision"]["label"] == "r6"
    revision, text, _ = ask()
    assert (revision, text) == ("r6", oracle["b"])
    assert Job.objects.get(public_id=rolled["job_id"]).state == "running"
