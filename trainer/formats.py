"""The six dataset formats: each row becomes a `Sample`, checked before anything is loaded.

| format | fields | trained on |
| --- | --- | --- |
| alpaca | `instruction`, optional `input`, `output` | `output` |
| chatml | `messages`: [{role, content}, ...] | the last assistant message |
| sharegpt | `conversations`: [{from: human/gpt/system, value}, ...] | the last `gpt` message |
| prompt_completion | `prompt`, `completion` | `completion` |
| text | `text` | all of it |
| pretokenized | `input_ids`, optional `labels` | `labels` where not -100, else all |

`parse_row` is pure: a row that does not fit raises `DataError("row 7: missing field 'output'
(alpaca)")`. Rendering a sample to token ids needs the tokenizer and lives in `trainer.data`.
List fields given as a JSON string (as a CSV cell holds them) are decoded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Every format with its label for people, in the order forms list them; the control plane
# imports this for its choices.
FORMAT_CHOICES = [
    ("alpaca", "Alpaca"),
    ("chatml", "ChatML"),
    ("sharegpt", "ShareGPT"),
    ("prompt_completion", "Prompt-completion"),
    ("text", "Plain text"),
    ("pretokenized", "Pre-tokenized"),
]
FORMATS = tuple(value for value, _ in FORMAT_CHOICES)

IGNORE_INDEX = -100  # labels the loss skips: the prompt, and padding

# ShareGPT speakers, and the chat roles they stand for.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}


class DataError(Exception):
    """The dataset cannot be used; the message names the row and field. The CLI exits 2."""


@dataclass(frozen=True)
class PromptCompletion:
    prompt: str
    completion: str


@dataclass(frozen=True)
class Conversation:
    """A chat whose last message is the assistant reply to train on."""

    messages: tuple[tuple[str, str], ...]  # (role, content); role is system/user/assistant


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Tokens:
    input_ids: tuple[int, ...]
    labels: tuple[int, ...] | None


Sample = PromptCompletion | Conversation | Text | Tokens

ALPACA_PROMPT = (
    "Below is an instruction that describes a task{with_input}. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n{input_block}### Response:\n"
)


def alpaca_prompt(instruction: str, input_text: str) -> str:
    """The Stanford Alpaca prompt, with or without its input block."""
    if input_text:
        return ALPACA_PROMPT.format(
            with_input=", paired with an input that provides further context",
            instruction=instruction,
            input_block=f"### Input:\n{input_text}\n\n",
        )
    return ALPACA_PROMPT.format(with_input="", instruction=instruction, input_block="")


def parse_row(row: Any, dataset_format: str, row_number: int) -> Sample:
    """The sample in `row`, or DataError naming `row_number` and the bad field."""
    where = _Where(row_number, dataset_format)
    if not isinstance(row, dict):
        raise where.error(f"expected an object with the {dataset_format} fields, got {_kind(row)}")
    if dataset_format == "alpaca":
        instruction = where.string(row, "instruction")
        input_text = where.string(row, "input", optional=True)
        output = where.string(row, "output")
        return PromptCompletion(alpaca_prompt(instruction, input_text), output)
    if dataset_format == "prompt_completion":
        return PromptCompletion(where.string(row, "prompt"), where.string(row, "completion"))
    if dataset_format == "text":
        return Text(where.string(row, "text"))
    if dataset_format == "chatml":
        return _conversation(where, row, "messages", "role", "content", _chat_role)
    if dataset_format == "sharegpt":
        return _conversation(where, row, "conversations", "from", "value", _sharegpt_role)
    if dataset_format == "pretokenized":
        return _tokens(where, row)
    raise ValueError(f"unknown dataset format {dataset_format!r}")


class _Where:
    """Builds the errors for one row."""

    def __init__(self, row_number: int, dataset_format: str) -> None:
        self.row_number = row_number
        self.dataset_format = dataset_format

    def error(self, problem: str) -> DataError:
        return DataError(f"row {self.row_number}: {problem} ({self.dataset_format})")

    def string(self, row: dict, name: str, *, optional: bool = False) -> str:
        value = row.get(name)
        if value is None and optional:
            return ""
        if name not in row:
            raise self.error(f"missing field '{name}'")
        if not isinstance(value, str):
            raise self.error(f"field '{name}' must be a string, got {_kind(value)}")
        return value

    def items(self, row: dict, name: str) -> list:
        if name not in row:
            raise self.error(f"missing field '{name}'")
        value = row[name]
        if isinstance(value, str):  # a CSV cell holds a list as JSON text
            try:
                value = json.loads(value)
            except ValueError:
                raise self.error(f"field '{name}' must be a list, got a string") from None
        if not isinstance(value, list):
            raise self.error(f"field '{name}' must be a list, got {_kind(value)}")
        if not value:
            raise self.error(f"field '{name}' is empty")
        return value


def _chat_role(role: str) -> str | None:
    return role if role in ("system", "user", "assistant") else None


def _sharegpt_role(speaker: str) -> str | None:
    return SHAREGPT_ROLES.get(speaker)


def _conversation(
    where: _Where, row: dict, name: str, role_key: str, content_key: str, to_role
) -> Conversation:
    messages: list[tuple[str, str]] = []
    for index, item in enumerate(where.items(row, name)):
        field = f"{name}[{index}]"
        if not isinstance(item, dict):
            raise where.error(f"field '{field}' must be an object, got {_kind(item)}")
        for key in (role_key, content_key):
            if key not in item:
                raise where.error(f"missing field '{field}.{key}'")
            if not isinstance(item[key], str):
                raise where.error(f"field '{field}.{key}' must be a string, got {_kind(item[key])}")
        role = to_role(item[role_key])
        if role is None:
            allowed = "system, user, assistant" if to_role is _chat_role else "human, gpt, system"
            raise where.error(
                f"field '{field}.{role_key}' must be one of {allowed}, got {item[role_key]!r}"
            )
        messages.append((role, item[content_key]))
    last_reply = max((i for i, (role, _) in enumerate(messages) if role == "assistant"), default=-1)
    if last_reply < 0:
        speaker = "assistant" if to_role is _chat_role else "gpt"
        raise where.error(f"field '{name}' has no {speaker} message to train on")
    # Messages after the last reply have no answer to learn, so they are dropped.
    return Conversation(tuple(messages[: last_reply + 1]))


def _tokens(where: _Where, row: dict) -> Tokens:
    input_ids = where.items(row, "input_ids")
    if not all(_is_int(token) and token >= 0 for token in input_ids):
        raise where.error("field 'input_ids' must hold whole numbers of at least 0")
    if row.get("labels") is None:
        return Tokens(tuple(input_ids), None)
    labels = where.items(row, "labels")
    if not all(_is_int(label) and (label >= 0 or label == IGNORE_INDEX) for label in labels):
        raise where.error(
            f"field 'labels' must hold whole numbers of at least 0, or {IGNORE_INDEX}"
        )
    if len(labels) != len(input_ids):
        raise where.error(
            f"field 'labels' has {len(labels)} items but 'input_ids' has {len(input_ids)}"
        )
    return Tokens(tuple(input_ids), tuple(labels))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    kinds = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    return kinds.get(type(value), type(value).__name__)
