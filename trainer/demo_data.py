"""A small, learnable toy dataset in each of the six formats: reverse a few letters.

Every row asks for the letters of a short sequence in reverse order ("c a f" → "f a c"), so a
model's loss on it falls within a few dozen steps, even for the random tiny model of
`trainer.tiny`. Rows are the same on every call. `python -m trainer.demo_data DIR` writes them.

The pretokenized rows need no tokenizer: letter k is token id 100 + k, and ids 97 to 99 mark
the start, the arrow and the end, all below 256 so any vocabulary holds them. Every second
pretokenized row carries `labels` that mask its prompt; the others train on every token.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from trainer.formats import FORMATS

ROWS = 64
LETTERS = "abcdefgh"
INSTRUCTION = "Reverse the letters."

_START, _ARROW, _END, _LETTER_BASE = 97, 99, 98, 100


def letter_sequences(rows: int = ROWS, *, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.sample(LETTERS, k=rng.randint(3, 5)) for _ in range(rows)]


def rows_for(dataset_format: str, sequences: list[list[str]]) -> list[dict]:
    rows = []
    for index, letters in enumerate(sequences):
        forward, backward = " ".join(letters), " ".join(reversed(letters))
        if dataset_format == "alpaca":
            row = {"instruction": INSTRUCTION, "input": forward, "output": backward}
        elif dataset_format == "chatml":
            row = {
                "messages": [
                    {"role": "system", "content": "You reverse letters."},
                    {"role": "user", "content": forward},
                    {"role": "assistant", "content": backward},
                ]
            }
        elif dataset_format == "sharegpt":
            row = {
                "conversations": [
                    {"from": "human", "value": f"Reverse: {forward}"},
                    {"from": "gpt", "value": backward},
                ]
            }
        elif dataset_format == "prompt_completion":
            row = {"prompt": f"Reverse: {forward}\nAnswer:", "completion": f" {backward}"}
        elif dataset_format == "text":
            row = {"text": f"Reverse: {forward} -> {backward}"}
        elif dataset_format == "pretokenized":
            ids = [_LETTER_BASE + LETTERS.index(letter) for letter in letters]
            prompt = [_START, *ids, _ARROW]
            answer = [*reversed(ids), _END]
            row = {"input_ids": prompt + answer}
            if index % 2 == 0:
                row["labels"] = [-100] * len(prompt) + answer
        else:
            raise ValueError(f"unknown dataset format {dataset_format!r}")
        rows.append(row)
    return rows


def write_demo_datasets(directory: str | Path, *, rows: int = ROWS) -> dict[str, Path]:
    """Write `<format>.jsonl` for each format into `directory` (created); their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sequences = letter_sequences(rows)
    paths = {}
    for dataset_format in FORMATS:
        path = directory / f"{dataset_format}.jsonl"
        lines = (json.dumps(row) + "\n" for row in rows_for(dataset_format, sequences))
        path.write_text("".join(lines), encoding="utf-8")
        paths[dataset_format] = path
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m trainer.demo_data DIRECTORY")
    for name, written in write_demo_datasets(sys.argv[1]).items():
        print(f"{name}: {written}")
