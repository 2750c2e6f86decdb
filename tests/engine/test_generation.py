"""Generation on the session's engine: greedy answers per adapter, mixed-adapter batches,
streams, stop strings and finish reasons, seeds, and ChatML chats."""

from __future__ import annotations

import json
import threading

import httpx

from tests.adapters import PROMPT
from tests.engine.conftest import sse

CHAT = [{"role": "user", "content": "Reverse the letters: a b c"}]
ROUNDS = 10


def _stream(engine, path: str, body: dict) -> tuple[httpx.Headers, list[str]]:
    with httpx.stream(
        "POST", f"{engine.url}{path}", json=body, headers=engine.headers, timeout=60
    ) as response:
        assert response.status_code == 200
        return response.headers, sse(response)


def test_it_answers_greedily_and_differently_for_the_base_and_each_adapter(served):
    texts = {
        model: served.complete(model, PROMPT)["choices"][0]["text"] for model in ("base", "a", "b")
    }

    assert len(set(texts.values())) == 3, texts
    assert all(texts.values()), texts
    for model, text in texts.items():
        assert served.complete(model, PROMPT)["choices"][0]["text"] == text


def test_a_completion_has_the_openai_shape(served):
    answer = served.complete("a", PROMPT, max_tokens=5)

    assert set(answer) == {"id", "object", "created", "model", "choices", "usage"}
    assert answer["id"].startswith("cmpl-") and answer["object"] == "text_completion"
    assert answer["model"] == "a" and isinstance(answer["created"], int)
    [choice] = answer["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] == "length"
    prompt_tokens = answer["usage"]["prompt_tokens"]
    assert answer["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 5,
        "total_tokens": prompt_tokens + 5,
    }


def test_a_batch_mixing_adapters_gives_each_request_its_answer_alone(served):
    requests = [
        {"model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0}
        for model in ("base", "a", "b")
        for prompt in (PROMPT, "Hello")
    ] + [{"model": "b", "prompt": "Once upon", "max_tokens": 10, "temperature": 0.8, "seed": 7}]
    alone = [served.complete(**body)["choices"][0]["text"] for body in requests]
    clients = [served.client() for _ in requests]
    for client in clients:  # connected beforehand, so the requests go out together
        client.get("/health")

    rounds = []
    for _ in range(ROUNDS):
        before = served.stats()
        assert _send_together(clients, requests) == alone
        rounds.append(served.stats()["batches_total"] - before["batches_total"])
        if rounds[-1] == 1:
            break

    # Requests sent together land in the gather window of one batch (a busy machine may split
    # a round; one whole round is enough).
    assert rounds[-1] == 1, rounds
    assert served.stats()["max_batch_seen"] >= len(requests)


def _send_together(clients: list[httpx.Client], requests: list[dict]) -> list[str]:
    """Post each request on its own client at the same moment; the answers' texts."""
    start = threading.Barrier(len(requests))
    texts = [""] * len(requests)

    def send(index: int) -> None:
        start.wait()
        answer = clients[index].post("/v1/completions", json=requests[index]).json()
        texts[index] = answer["choices"][0]["text"]

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return texts


def test_stream_chunks_add_up_to_the_answer_then_usage_then_done(served):
    body = {"model": "b", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    whole = served.complete(**body)

    headers, events = _stream(
        served,
        "/v1/completions",
        {**body, "stream": True, "stream_options": {"include_usage": True}},
    )

    assert headers["content-type"] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    assert headers["transfer-encoding"] == "chunked"
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    *content, last, usage = chunks
    assert "".join(chunk["choices"][0]["text"] for chunk in content) == whole["choices"][0]["text"]
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in content)
    assert last["choices"][0] == {
        "index": 0,
        "text": "",
        "finish_reason": "length",
        "logprobs": None,
    }
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
    assert all(chunk["object"] == "text_completion" and chunk["model"] == "b" for chunk in chunks)


def test_a_stream_without_include_usage_has_no_usage_chunk(served):
    _, events = _stream(
        served,
        "/v1/completions",
        {"model": "base", "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "stream": True},
    )

    assert events[-1] == "[DONE]"
    assert all("usage" not in json.loads(event) for event in events[:-1])
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_a_chat_streams_the_role_then_content_and_matches_the_answer(served):
    body = {"model": "a", "messages": CHAT, "max_tokens": 8, "temperature": 0}
    whole = httpx.post(
        f"{served.url}/v1/chat/completions", json=body, headers=served.headers, timeout=60
    ).json()

    _, events = _stream(
        served,
        "/v1/chat/completions",
        {**body, "stream": True, "stream_options": {"include_usage": True}},
    )

    assert whole["id"].startswith("chatcmpl-") and whole["object"] == "chat.completion"
    [choice] = whole["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length") and choice["logprobs"] is None
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    content = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks[1:-1])
    assert content == choice["message"]["content"]
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-2]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert chunks[-1]["usage"] == whole["usage"]


def test_chats_are_answered_in_the_chatml_the_adapter_was_trained_on(served, tiny_model):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    rendered = "<|im_start|>user\nReverse the letters: a b c<|im_end|>\n<|im_start|>assistant\n"
    prompt_tokens = 1 + len(tokenizer.encode(rendered, add_special_tokens=False).ids)  # BOS

    chat = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "a", "messages": CHAT, "max_tokens": 8, "temperature": 0},
        headers=served.headers,
    ).json()
    completion = served.complete("a", rendered, max_tokens=8)

    assert chat["usage"]["prompt_tokens"] == prompt_tokens
    assert completion["usage"]["prompt_tokens"] == prompt_tokens
    text = completion["choices"][0]["text"]
    assert chat["choices"][0]["message"]["content"] == text.split("<|im_end|>")[0]


def test_a_stop_string_ends_the_text_before_it_in_answers_and_streams(served):
    text = served.complete("b", PROMPT)["choices"][0]["text"]
    stop = " d"
    assert stop in text
    body = {"model": "b", "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "stop": [stop]}

    stopped = served.complete(**body)
    _, events = _stream(served, "/v1/completions", {**body, "stream": True})

    assert stopped["choices"][0]["text"] == text[: text.index(stop)]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] < 12
    pieces = [json.loads(event)["choices"][0]["text"] for event in events[:-1]]
    assert "".join(pieces) == text[: text.index(stop)]
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "stop"


def test_max_tokens_ends_with_length(served):
    answer = served.complete("base", PROMPT, max_tokens=3)

    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 3


def test_a_seed_makes_sampling_reproducible(served):
    body = {"prompt": "Once upon", "max_tokens": 16, "temperature": 1.0, "top_p": 0.9}

    first = served.complete("base", seed=1234, **body)["choices"][0]["text"]
    again = served.complete("base", seed=1234, **body)["choices"][0]["text"]
    other = served.complete("base", seed=4321, **body)["choices"][0]["text"]
    greedy = served.complete("base", **{**body, "temperature": 0})["choices"][0]["text"]

    assert first == again
    assert other != first
    assert greedy not in (first, other)


def test_every_served_model_answers_the_chat_prompt_the_control_plane_tests_use(
    served, tiny_adapters, tmp_path
):
    assert served.load("a-step5", tiny_adapters["a_checkpoint"]).status_code == 200
    try:
        answers = {
            model: httpx.post(
                f"{served.url}/v1/chat/completions",
                json={"model": model, "messages": CHAT, "max_tokens": 8, "temperature": 0},
                headers=served.headers,
            ).json()["choices"][0]["message"]["content"]
            for model in ("base", "a", "b", "a-step5")
        }
    finally:
        served.unload("a-step5")

    assert all(answers.values()), answers
    assert len(set(answers.values())) == 4, answers
