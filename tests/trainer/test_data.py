"""Rows to samples (pure), samples to token ids with prompt masking (the tiny tokenizer), the
held-out split, grading and finding the checkpoint to resume from."""

from __future__ import annotations

import http.server
import json
import math
import threading

import pytest

from trainer.config import ConfigError
from trainer.data import Encoder, encode_and_split, read_samples
from trainer.formats import (
    IGNORE_INDEX,
    Conversation,
    DataError,
    PromptCompletion,
    Text,
    Tokens,
    alpaca_prompt,
    parse_row,
)
from trainer.train import grade, resolve_checkpoint


def test_it_reads_each_format_into_a_sample():
    assert parse_row(
        {"instruction": "Add.", "input": "1 2", "output": "3"}, "alpaca", 1
    ) == PromptCompletion(alpaca_prompt("Add.", "1 2"), "3")
    assert parse_row({"instruction": "Hi.", "output": "Hello"}, "alpaca", 1).prompt == (
        alpaca_prompt("Hi.", "")
    )
    assert parse_row({"prompt": "p", "completion": "c"}, "prompt_completion", 1) == (
        PromptCompletion("p", "c")
    )
    assert parse_row({"text": "t"}, "text", 1) == Text("t")
    assert parse_row({"input_ids": [1, 2]}, "pretokenized", 1) == Tokens((1, 2), None)
    assert parse_row({"input_ids": [1, 2], "labels": [-100, 2]}, "pretokenized", 1) == Tokens(
        (1, 2), (-100, 2)
    )


def test_a_chat_ends_at_its_last_assistant_message():
    row = {
        "messages": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
            {"role": "user", "content": "never answered"},
        ]
    }

    assert parse_row(row, "chatml", 1) == Conversation(
        (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    )


def test_sharegpt_speakers_become_chat_roles():
    row = {
        "conversations": [
            {"from": "system", "value": "s"},
            {"from": "human", "value": "q"},
            {"from": "gpt", "value": "a"},
        ]
    }

    assert parse_row(row, "sharegpt", 1) == Conversation(
        (("system", "s"), ("user", "q"), ("assistant", "a"))
    )


@pytest.mark.parametrize(
    ("row", "dataset_format", "message"),
    [
        ({"instruction": "x"}, "alpaca", "missing field 'output'"),
        (
            {"instruction": 1, "output": "x"},
            "alpaca",
            "field 'instruction' must be a string, got a number",
        ),
        (["text"], "text", "expected an object with the text fields, got a list"),
        ({"messages": []}, "chatml", "field 'messages' is empty"),
        (
            {"messages": [{"role": "user", "content": "q"}]},
            "chatml",
            "field 'messages' has no assistant message to train on",
        ),
        (
            {"messages": [{"role": "robot", "content": "q"}]},
            "chatml",
            "field 'messages[0].role' must be one of system, user, assistant, got 'robot'",
        ),
        (
            {"conversations": "oops"},
            "sharegpt",
            "field 'conversations' must be a list, got a string",
        ),
        ({"prompt": "p"}, "prompt_completion", "missing field 'completion'"),
        (
            {"input_ids": [1, -2]},
            "pretokenized",
            "field 'input_ids' must hold whole numbers of at least 0",
        ),
        (
            {"input_ids": [1, 2], "labels": [2]},
            "pretokenized",
            "field 'labels' has 1 items but 'input_ids' has 2",
        ),
    ],
)
def test_it_names_the_row_and_the_field_that_does_not_fit(row, dataset_format, message):
    with pytest.raises(DataError) as caught:
        parse_row(row, dataset_format, 7)

    assert str(caught.value) == f"row 7: {message} ({dataset_format})"


def test_it_reads_json_arrays_and_csv_with_list_cells(tmp_path):
    (tmp_path / "rows.json").write_text(json.dumps([{"text": "a"}, {"text": "b"}]))
    messages = json.dumps([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    (tmp_path / "rows.csv").write_text(
        "messages,other\n" + '"' + messages.replace('"', '""') + '",\n'
    )

    assert read_samples(str(tmp_path / "rows.json"), "text") == [(1, Text("a")), (2, Text("b"))]
    assert read_samples(str(tmp_path / "rows.csv"), "chatml") == [
        (1, Conversation((("user", "q"), ("assistant", "a"))))
    ]


def test_it_reads_only_max_samples_rows(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n{"broken": \n')

    assert read_samples(str(tmp_path / "rows.jsonl"), "text", max_samples=2) == [
        (1, Text("a")),
        (2, Text("b")),
    ]
    with pytest.raises(DataError, match="row 3: not valid JSON"):
        read_samples(str(tmp_path / "rows.jsonl"), "text")


def test_a_hub_dataset_that_is_not_there_is_a_data_error_naming_it(monkeypatch):
    """The organization's own hub answers 404 (as Trainyard's does for a repository the
    attempt's token cannot read)."""

    class NotThere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"error": "Repository not found"}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotThere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/hf")
    monkeypatch.setenv("TRAINYARD_HUB_NAMESPACE", "acme")
    try:
        with pytest.raises(DataError, match=r"cannot load dataset acme/rows at v2 from the hub"):
            read_samples("acme/rows@v2", "alpaca")
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_only_the_completion_is_learned(tokenizer):
    encoder = Encoder(tokenizer, max_length=128, vocab_size=len(tokenizer))

    example = encoder.encode(PromptCompletion("Reverse: a b", " b a"), 1)

    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prompt, completion = [bos, *ids(tokenizer, "Reverse: a b")], [*ids(tokenizer, " b a"), eos]
    assert example.input_ids == prompt + completion
    assert example.labels == [IGNORE_INDEX] * len(prompt) + completion


def test_text_is_learned_whole(tokenizer):
    encoder = Encoder(tokenizer, max_length=128, vocab_size=len(tokenizer))

    example = encoder.encode(Text("hello world"), 1)

    assert example.labels == example.input_ids
    assert example.input_ids[0] == tokenizer.bos_token_id


def test_a_chat_without_a_template_uses_chatml_text(tokenizer):
    encoder = Encoder(tokenizer, max_length=256, vocab_size=len(tokenizer))

    example = encoder.encode(Conversation((("user", "q"), ("assistant", "a"))), 1)

    learned = [token for token in example.labels if token != IGNORE_INDEX]
    assert tokenizer.decode(example.input_ids[1:]) == (
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n</s>"
    )
    assert tokenizer.decode(learned) == "a<|im_end|>\n</s>"


def test_a_chat_uses_the_tokenizers_template_when_it_has_one(tokenizer, monkeypatch):
    monkeypatch.setattr(
        tokenizer,
        "chat_template",
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}",
    )
    encoder = Encoder(tokenizer, max_length=256, vocab_size=len(tokenizer))

    example = encoder.encode(Conversation((("system", "s"), ("user", "q"), ("assistant", "a"))), 1)

    learned = [token for token in example.labels if token != IGNORE_INDEX]
    assert tokenizer.decode(example.input_ids) == "[system] s\n[user] q\n[assistant] a\n"
    assert tokenizer.decode(learned) == "a\n"


def test_a_chat_template_that_refuses_the_messages_names_the_row(tokenizer, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template", "{{ raise_exception('no system role') }}")
    encoder = Encoder(tokenizer, max_length=256, vocab_size=len(tokenizer))

    with pytest.raises(DataError, match="row 9: the tokenizer's chat template refused"):
        encoder.encode(Conversation((("system", "s"), ("assistant", "a"))), 9)


def test_pretokenized_labels_are_kept_and_ids_are_checked(tokenizer):
    encoder = Encoder(tokenizer, max_length=128, vocab_size=len(tokenizer))

    assert encoder.encode(Tokens((5, 6, 7), (-100, 6, 7)), 1).labels == [-100, 6, 7]
    assert encoder.encode(Tokens((5, 6, 7), None), 1).labels == [5, 6, 7]
    with pytest.raises(DataError, match="row 4: field 'input_ids' holds token id 99999"):
        encoder.encode(Tokens((5, 99999), None), 4)


def test_a_row_with_nothing_to_learn_within_max_length_is_skipped(tokenizer):
    encoder = Encoder(tokenizer, max_length=8, vocab_size=len(tokenizer))
    long_prompt = PromptCompletion("a very long prompt that fills every position", "x")
    samples = [(1, long_prompt), (2, Text("one")), (3, Text("two")), (4, Text("three"))]

    split = encode_and_split(samples, encoder, eval_fraction=0.1, seed=42)

    assert encoder.encode(long_prompt, 1) is None
    assert (len(split.train), len(split.held_out), split.skipped) == (2, 1, 1)
    assert all(len(example.input_ids) <= 8 for example in split.train + split.held_out)


def test_it_needs_two_usable_rows(tokenizer):
    encoder = Encoder(tokenizer, max_length=128, vocab_size=len(tokenizer))

    with pytest.raises(DataError, match="need at least 2 rows"):
        encode_and_split([(1, Text("only"))], encoder, eval_fraction=0.5, seed=1)


@pytest.mark.parametrize(
    ("before", "after", "bad_loss", "passed", "reason"),
    [
        (2.0, 1.5, None, True, None),
        (2.0, 2.0, None, True, None),
        (2.0, 2.5, None, False, "held-out loss got worse (before 2, after 2.5)"),
        (2.0, 1.0, math.nan, False, "loss is NaN"),
        (2.0, 1.0, math.inf, False, "loss is infinite"),
        (2.0, math.nan, None, False, "held-out loss is nan"),
    ],
)
def test_grading(before, after, bad_loss, passed, reason):
    result = grade(eval_loss_before=before, eval_loss_after=after, bad_loss=bad_loss)

    assert (result.passed, result.reason) == (passed, reason)


def test_it_resumes_from_a_checkpoint_or_the_latest_complete_one_in_a_directory(tmp_path):
    for step in (5, 10, 20):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (5, 10):  # checkpoint-20 was cut off before its trainer_state.json
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")

    assert resolve_checkpoint("") is None
    assert resolve_checkpoint(str(tmp_path / "checkpoint-5")) == str(tmp_path / "checkpoint-5")
    assert resolve_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")
    with pytest.raises(ConfigError, match="is not a directory"):
        resolve_checkpoint(str(tmp_path / "missing"))
