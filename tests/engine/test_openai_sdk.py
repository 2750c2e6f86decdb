"""The official `openai` package against the engine, as the control plane's clients use it."""

from __future__ import annotations

import openai
import pytest

from tests.adapters import PROMPT

CHAT = [{"role": "user", "content": "Reverse the letters: a b c"}]


@pytest.fixture
def client(served):
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key=served.secret, max_retries=0) as sdk:
        yield sdk


def test_chat_answers_and_streams_the_same_text_with_usage(client):
    answer = client.chat.completions.create(model="a", messages=CHAT, max_tokens=8, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="a",
            messages=CHAT,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    assert answer.object == "chat.completion" and answer.model == "a"
    assert answer.choices[0].message.role == "assistant" and answer.choices[0].message.content
    assert answer.usage.completion_tokens > 0 and answer.usage.prompt_tokens > 0
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed == answer.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == answer.usage
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert finish[-1] == answer.choices[0].finish_reason and set(finish[:-1]) == {None}


def test_chat_streams_without_usage_when_not_asked(client):
    chunks = list(
        client.chat.completions.create(
            model="b", messages=CHAT, max_tokens=4, temperature=0, stream=True
        )
    )

    assert all(chunk.usage is None and chunk.choices for chunk in chunks)


def test_completions_answer_and_stream(client, served):
    answer = client.completions.create(model="b", prompt=PROMPT, max_tokens=6, temperature=0)
    stream = list(
        client.completions.create(
            model="b",
            prompt=PROMPT,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    assert (
        answer.choices[0].text == served.complete("b", PROMPT, max_tokens=6)["choices"][0]["text"]
    )
    assert (
        "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
        == answer.choices[0].text
    )
    assert stream[-1].usage == answer.usage
    assert [model.id for model in client.models.list()][:3] == ["base", "a", "b"]


def test_errors_reach_the_sdk_as_its_own_exceptions(client, served):
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="base", prompt="hi", max_tokens=2, top_p=3)
    with (
        openai.OpenAI(base_url=f"{served.url}/v1", api_key="wrong", max_retries=0) as stranger,
        pytest.raises(openai.AuthenticationError),
    ):
        stranger.models.list()

    assert missing.value.body["type"] == "model_not_found"
    assert bad.value.body["param"] == "top_p"
