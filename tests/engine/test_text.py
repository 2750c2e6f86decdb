"""Text deltas from token ids (no split characters, nothing of a stop string sent) and the
registry's bookkeeping, without a process."""

from __future__ import annotations

import pytest

from engine.errors import ApiError
from engine.registry import Registry
from engine.text import IncrementalDecoder, StopMatcher


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tiny_model / "tokenizer.json"))


@pytest.mark.parametrize(
    "text", ["Reverse the letters: c b a", "héllo wörld ✓ 日本語 🙂 done", " leading space"]
)
def test_deltas_of_any_text_add_up_to_it_and_never_split_a_character(tokenizer, text):
    prompt = tokenizer.encode("Answer:", add_special_tokens=False).ids
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    decoder = IncrementalDecoder(lambda part: tokenizer.decode(part), prompt)

    deltas = [decoder.push(token) for token in ids] + [decoder.flush()]

    assert "".join(deltas) == text
    assert not any("\ufffd" in delta for delta in deltas)
    assert len([delta for delta in deltas if delta]) > 1  # it streams, it does not wait


def test_a_stop_string_across_pieces_is_never_sent():
    matcher = StopMatcher(("STOP", "<|im_end|>"))

    sent = [matcher.feed(piece) for piece in ["one tw", "o S", "TO", "P three"]]

    assert sent == ["one tw", "o ", "", ""]
    assert matcher.stopped and matcher.flush() == ""


def test_held_back_text_comes_out_when_it_was_not_a_stop_string():
    matcher = StopMatcher(("<|im_end|>",))

    assert matcher.feed("a <|im") == "a "
    assert matcher.feed("_start|>") == "<|im_start|>"
    assert matcher.feed("end <|") == "end "
    assert matcher.flush() == "<|"
    assert not matcher.stopped


def test_the_earliest_stop_string_wins():
    matcher = StopMatcher(("bb", "a"))

    assert matcher.feed("xxbba") == "xx"


def test_an_unloaded_adapter_is_forgotten_once_its_last_request_ends():
    drained: list[str] = []
    registry = Registry(base_name="base", base_root="/m", max_loras=1, on_drained=drained.append)
    registry.reserve("x", "/x")
    registry.commit("x")

    assert registry.acquire("x") == "x"
    registry.unload("x")
    assert not registry.served("x") and registry.taken("x") and drained == []
    with pytest.raises(ApiError) as missing:
        registry.acquire("x")
    registry.release("x")

    assert missing.value.error_type == "model_not_found"
    assert drained == ["x"]
    assert registry.stats()["requests_in_flight"] == 0
    with pytest.raises(ApiError) as full:
        registry.reserve("y", "/y")  # x's weights are still resident until forgotten
    assert full.value.error_type == "too_many_adapters"
    registry.forget("x")
    registry.reserve("y", "/y")
