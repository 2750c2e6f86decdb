"""Reading a dataset, turning its samples into token ids, and the held-out split.

`read_samples` needs no tokenizer and checks every row it reads, so a bad dataset fails before
the model is loaded. Row numbers in errors count from 1: for a `.jsonl` file the row number is
the line number (blank lines are skipped but counted), for a `.json` array it is the item's
position, and for a `.csv` file the data row's position after the header. An empty CSV cell
counts as a missing field.

`Encoder` renders samples with a tokenizer. Where a sample has a prompt, the prompt's tokens get
the label -100 so only the completion is learned. Chat samples use the tokenizer's chat
template when it has one, else the ChatML text template below.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.protocol import hub_reference
from trainer.formats import (
    IGNORE_INDEX,
    Conversation,
    DataError,
    PromptCompletion,
    Sample,
    Text,
    Tokens,
    parse_row,
)
from trainer.hub import hub_for

FILE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv")


def read_samples(
    dataset: str, dataset_format: str, *, max_samples: int | None = None
) -> list[tuple[int, Sample]]:
    """`(row_number, sample)` for the first `max_samples` rows (all when None).

    Raises DataError for a missing or unreadable file, an empty dataset, or the first row that
    does not fit `dataset_format`; rows after `max_samples` are not read.
    """
    samples: list[tuple[int, Sample]] = []
    for row_number, row in _rows(dataset):
        samples.append((row_number, parse_row(row, dataset_format, row_number)))
        if len(samples) == max_samples:
            break
    if not samples:
        raise DataError(f"dataset {dataset} has no rows")
    return samples


def _rows(dataset: str) -> Iterator[tuple[int, Any]]:
    path = Path(dataset).expanduser()
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".ndjson"):
            return _jsonl_rows(path)
        if suffix == ".json":
            return _json_rows(path)
        if suffix == ".csv":
            return _csv_rows(path)
        raise DataError(f"dataset file {path} must end with one of {', '.join(FILE_SUFFIXES)}")
    if path.exists() or _looks_like_path(dataset):
        raise DataError(f"dataset file {dataset} does not exist or is not a file")
    return _hub_rows(dataset)


def _looks_like_path(dataset: str) -> bool:
    return (
        dataset.startswith((".", "/", "~"))
        or dataset.lower().endswith(FILE_SUFFIXES)
        or dataset.count("/") > 1
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with _open(path) as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield line_number, json.loads(line)
            except ValueError as error:
                raise DataError(f"row {line_number}: not valid JSON ({error})") from None


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with _open(path) as file:
        text = file.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":  # JSON lines saved as .json
            yield from _jsonl_rows(path)
            return
        raise DataError(f"dataset file {path} is not valid JSON ({error})") from None
    if not isinstance(data, list):
        raise DataError(f"dataset file {path} must hold a JSON array of rows")
    yield from enumerate(data, start=1)


def _csv_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with _open(path, newline="") as file:
        for row_number, row in enumerate(csv.DictReader(file), start=1):
            yield row_number, {key: value for key, value in row.items() if key and value}


def _open(path: Path, **kwargs):
    try:
        return path.open(encoding="utf-8", **kwargs)
    except OSError as error:
        raise DataError(f"cannot read dataset file {path}: {error.strerror}") from None


def _hub_rows(dataset: str) -> Iterator[tuple[int, Any]]:
    """A hub dataset repository's training rows: its `.jsonl`, `.json` and `.csv` files
    (those whose name starts with `train`, when any does), in path order, fetched with
    `huggingface_hub`. A repository without such files is loaded with the `datasets`
    package, where it is installed (Parquet and scripts)."""
    repo_id, revision = hub_reference(dataset)
    paths = _hub_data_files(repo_id, revision)
    if not paths:
        yield from _datasets_rows(dataset, repo_id, revision)
        return
    row_offset = 0
    for path in paths:
        last = 0
        for row_number, row in _rows(str(path)):
            last = row_number
            yield row_offset + row_number, row
        row_offset += last


def _hub_data_files(repo_id: str, revision: str | None) -> list[Path]:
    from huggingface_hub import HfApi, hf_hub_download

    endpoint, token = hub_for(repo_id)
    try:
        listed = HfApi(endpoint=endpoint, token=token).list_repo_files(
            repo_id, repo_type="dataset", revision=revision
        )
        names = sorted(name for name in listed if name.lower().endswith(FILE_SUFFIXES))
        training = [name for name in names if name.rsplit("/", 1)[-1].startswith("train")]
        return [
            Path(
                hf_hub_download(
                    repo_id,
                    name,
                    repo_type="dataset",
                    revision=revision,
                    endpoint=endpoint,
                    token=token,
                )
            )
            for name in training or names
        ]
    except Exception as error:  # the hub's errors are many and change between versions
        at = f" at {revision}" if revision else ""
        raise DataError(f"cannot load dataset {repo_id}{at} from the hub: {error}") from None


def _datasets_rows(dataset: str, repo_id: str, revision: str | None):
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"dataset {dataset} has no .jsonl, .json or .csv file; loading other formats "
            "needs the `datasets` package (pip install datasets)"
        ) from None
    try:
        rows = datasets.load_dataset(repo_id, revision=revision, split="train")
    except Exception as error:  # the hub's errors are many and change between versions
        raise DataError(f"cannot load dataset {dataset}: {error}") from None
    yield from enumerate(rows, start=1)


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]


# The chat template for a tokenizer that has none.
CHAT_TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"
CHAT_REPLY_START = "<|im_start|>assistant\n"


class Encoder:
    """Turns samples into `Example`s of at most `max_length` tokens."""

    def __init__(self, tokenizer: Any, *, max_length: int, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.vocab_size = vocab_size
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def encode(self, sample: Sample, row_number: int) -> Example | None:
        """The example, or None when truncation leaves no token to learn."""
        if isinstance(sample, Tokens):
            example = self._tokens(sample, row_number)
        elif isinstance(sample, Text):
            ids = self.bos + self._ids(sample.text) + self.eos
            example = Example(ids, list(ids))
        elif isinstance(sample, PromptCompletion):
            example = self._pair(self.bos + self._ids(sample.prompt), self._ids(sample.completion))
        elif isinstance(sample, Conversation):
            example = self._conversation(sample, row_number)
        else:
            raise TypeError(f"not a sample: {sample!r}")
        ids = example.input_ids[: self.max_length]
        labels = example.labels[: self.max_length]
        # The label at position 0 is never predicted (the loss shifts labels left by one).
        if not any(label != IGNORE_INDEX for label in labels[1:]):
            return None
        return Example(ids, labels)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _pair(self, prompt_ids: list[int], completion_ids: list[int]) -> Example:
        completion_ids = completion_ids + self.eos
        return Example(
            prompt_ids + completion_ids, [IGNORE_INDEX] * len(prompt_ids) + completion_ids
        )

    def _conversation(self, sample: Conversation, row_number: int) -> Example:
        *history, (_, reply) = sample.messages
        template = getattr(self.tokenizer, "chat_template", None)
        if not template:
            prompt = "".join(CHAT_TURN.format(role=r, content=c) for r, c in history)
            prompt += CHAT_REPLY_START
            return self._pair(self.bos + self._ids(prompt), self._ids(reply + "<|im_end|>\n"))
        messages = [{"role": role, "content": content} for role, content in sample.messages]
        try:
            prompt = self.tokenizer.apply_chat_template(
                messages[:-1], tokenize=False, add_generation_prompt=True
            )
            full = self.tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception as error:  # templates raise what they like (jinja2 exceptions)
            raise DataError(
                f"row {row_number}: the tokenizer's chat template refused the messages: {error}"
            ) from None
        # The full chat normally starts with the prompt; a template that renders earlier turns
        # differently once a reply follows (some drop reasoning text) still shares a prefix.
        # The template writes its own special tokens, as `apply_chat_template(tokenize=True)`
        # assumes, so none are added here.
        split = _common_prefix_length(prompt, full)
        prompt_ids = self._ids(full[:split])
        completion_ids = self._ids(full[split:])
        return Example(
            prompt_ids + completion_ids, [IGNORE_INDEX] * len(prompt_ids) + completion_ids
        )

    def _tokens(self, sample: Tokens, row_number: int) -> Example:
        too_big = next((token for token in sample.input_ids if token >= self.vocab_size), None)
        if too_big is not None:
            raise DataError(
                f"row {row_number}: field 'input_ids' holds token id {too_big}, outside the "
                f"model's vocabulary of {self.vocab_size} (pretokenized)"
            )
        labels = sample.labels if sample.labels is not None else sample.input_ids
        return Example(list(sample.input_ids), list(labels))


def _common_prefix_length(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def held_out_positions(count: int, *, eval_fraction: float, seed: int) -> set[int]:
    """Which of `count` examples (count >= 2) are held out: `eval_fraction` of them, at least
    one and at most count - 1, drawn by `seed`."""
    held_out_count = min(max(1, round(count * eval_fraction)), count - 1)
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return set(order[:held_out_count])


@dataclass(frozen=True)
class Split:
    train: list[Example]
    held_out: list[Example]
    skipped: int  # rows with nothing to learn within max_length


def encode_and_split(
    samples: list[tuple[int, Sample]], encoder: Encoder, *, eval_fraction: float, seed: int
) -> Split:
    """Encode every sample and hold out `eval_fraction` of them (at least one), chosen by
    `seed`. Raises DataError when fewer than two rows are left to split."""
    examples: list[Example] = []
    skipped = 0
    for row_number, sample in samples:
        example = encoder.encode(sample, row_number)
        if example is None:
            skipped += 1
        else:
            examples.append(example)
    if len(examples) < 2:
        raise DataError(
            f"need at least 2 rows with tokens to learn within max_length {encoder.max_length} "
            f"(one to train on, one to hold out), got {len(examples)}"
        )
    held_out = held_out_positions(len(examples), eval_fraction=eval_fraction, seed=seed)
    return Split(
        train=[example for i, example in enumerate(examples) if i not in held_out],
        held_out=[example for i, example in enumerate(examples) if i in held_out],
        skipped=skipped,
    )
