"""Finding training metrics in workload log lines.

`parse_metric_line` reads one log line and returns a `ParsedMetric`, or None when the line is
not a metric. It knows three formats:

1. Hugging Face Trainer lines, the Python dict `print(logs)` writes:
   `{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 0.0002, 'epoch': 0.25}`, the eval line
   `{'eval_loss': 2.1, ...}` and the final `{'train_runtime': 12.3, 'train_loss': 2.0, ...}`.
2. nanoGPT lines: `iter 100: loss 2.4712, time 380.12ms, mfu 12.34%` and the eval line
   `step 200: train loss 2.1234, val loss 2.2345`. The eval line is an evaluation, not a
   training step: its values are `train_loss` and `val_loss` in `extra`, never `loss`, so the
   training curve keeps one point per step.
3. Our own JSON lines: `{"type": "metrics", "step": 3, "loss": 1.5, "lr": 2e-4, ...}`.

A dict line (formats 1 and 3) must be the whole line, apart from surrounding whitespace, and
must carry a real number (not a bool, not a numeric string) under `loss`, `eval_loss`,
`train_loss` or `step`. nanoGPT lines must start the line after optional whitespace.

What comes back: `loss` keeps NaN and infinity, because a diverging run must be noticed;
`epoch` and `learning_rate` are finite or None; `extra` holds only finite numbers under keys
PostgreSQL's `jsonb` can store (no NUL, no lone surrogate: `storable_text`), so it can be
stored as JSON; a key it cannot store is named in `dropped_keys`, for the caller to report;
`step` is an integer in the range `MetricPoint.step` can hold, or None when the line carries
none (or an unusable one) and the caller numbers it.

The function is pure and does not touch the database. Most log lines are not metrics, so it
turns them away on their first character and a substring test; only a line that starts with
`{`, ends with `}` and mentions `loss` or `step` reaches a parser.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any

# A line longer than this is not parsed at all: no trainer prints a metric line that long, and
# bounding the input bounds the work `json.loads` and `ast.parse` can be made to do.
MAX_LINE_CHARS = 10_000

# `MetricPoint.step` is a PositiveIntegerField; a larger step could not be stored.
MAX_STEP = 2_147_483_647

# A dict line is a metric only if one of these holds a real number.
ANCHOR_KEYS = ("loss", "eval_loss", "train_loss", "step")
# Keys that have their own field in ParsedMetric (or mean nothing), so never go to `extra`.
_OWN_KEYS = frozenset({"loss", "epoch", "learning_rate", "lr", "step", "type"})
# Our JSON lines may say what they are; one that says something else (a checkpoint event,
# say) is not a metric even though it carries a step.
_METRICS_TYPE = "metrics"

# Characters no PostgreSQL text or `jsonb` value can hold: NUL, and the UTF-16 surrogates
# (a JSON `\ud800` escape decodes to one, and it has no UTF-8 form).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)"
# nanoGPT's train.py prints
#   f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%"
# (older versions stop after the time) and, at each evaluation,
#   f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}".
# Forks append fields after a comma, which are tolerated and ignored; anything else after the
# known fields ("iter 5: loss 2.0 is high") is not a metric.
_NANOGPT_ITER = re.compile(
    rf"iter ([0-9]{{1,12}}): loss ({_NUMBER})(?:, time ({_NUMBER})ms)?(?:, mfu ({_NUMBER})%)?"
    r"(?:,.*)?",
    re.ASCII,
)
_NANOGPT_EVAL = re.compile(
    rf"step ([0-9]{{1,12}}): train loss ({_NUMBER}), val loss ({_NUMBER})(?:,.*)?",
    re.ASCII,
)


@dataclass(frozen=True)
class ParsedMetric:
    step: int | None
    loss: float | None
    epoch: float | None
    learning_rate: float | None
    extra: dict[str, float]
    # Keys of numbers left out of `extra` because the database cannot store them.
    dropped_keys: tuple[str, ...] = ()


def storable_text(text: str) -> bool:
    """Whether PostgreSQL can store `text` (as text or inside `jsonb`)."""
    return _UNSTORABLE.search(text) is None


def may_hold_metric_lines(text: str) -> bool:
    """False when no line of `text` (lines joined) can be a metric line: parse_metric_line
    reads only a line that starts, once stripped, with `{`, `iter ` or `step `. One scan of
    a batch spares a parse of each of its lines when none can be."""
    return "{" in text or "iter " in text or "step " in text


def parse_metric_line(message: str) -> ParsedMetric | None:
    """Return the metric `message` carries, or None if it is not a metric line.

    Never raises for any string, and never evaluates code found in it.
    """
    if len(message) > MAX_LINE_CHARS:
        return None
    line = message.strip()
    if not line:
        return None
    if line[0] == "{":
        if line[-1] != "}" or ("loss" not in line and "step" not in line):
            return None
        data = _parse_dict(line)
        return _from_mapping(data) if data is not None else None
    if line.startswith("iter "):
        return _from_nanogpt_iter(line)
    if line.startswith("step "):
        return _from_nanogpt_eval(line)
    return None


def _parse_dict(line: str) -> dict[Any, Any] | None:
    """Read `line` as a JSON object, else as a Python dict literal; None if it is neither."""
    # The input is untrusted and the parsers fail in many ways (JSONDecodeError, SyntaxError,
    # ValueError for a call or an over-long integer, RecursionError or MemoryError for deep
    # nesting, and these differ between Python versions), so any failure means "not a metric".
    try:
        return json.loads(line)  # starts with "{" and ends with "}", so an object if anything
    except Exception:
        pass
    try:
        flat = _flat_number_dict(line)  # the Trainer's lines, cheaply; else a syntax tree
        return flat if flat is not None else _literal_dict(line)
    except Exception:
        return None


# What `print(dict)` writes for a dict of plain string keys and numbers, the Trainer's every
# line, read by a regular expression at a tenth of the cost of a syntax tree. A key's
# characters are those `repr` prints as they are (no quote, backslash, control character or
# lone surrogate: it escapes them, and a parser would refuse them raw).
_KEY_CHARS = r"[^'\\\x00-\x1f\x7f\ud800-\udfff]*"
_FLAT_KEY = rf"'{_KEY_CHARS}'"
_FLAT_NUMBER = r"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|inf)|nan"
_FLAT_DICT = re.compile(
    rf"\{{(?:{_FLAT_KEY}: (?:{_FLAT_NUMBER})(?:, {_FLAT_KEY}: (?:{_FLAT_NUMBER}))*)?\}}"
)
_FLAT_PAIR = re.compile(rf"'({_KEY_CHARS})': ({_FLAT_NUMBER})")


def _flat_number_dict(line: str) -> dict[str, int | float] | None:
    """`line` read as `_literal_dict` would, when it is a dict of plain string keys to int
    or float literals (nan and inf included); None for any other line. Raises ValueError
    where `_literal_dict` does (an int of more digits than Python converts)."""
    if not _FLAT_DICT.fullmatch(line):
        return None
    result: dict[str, int | float] = {}
    for key, number in _FLAT_PAIR.findall(line):
        plain_int = number.lstrip("-").isdigit()
        result[key] = int(number) if plain_int else float(number)
    return result


def _literal_dict(line: str) -> dict[Any, Any] | None:
    """A Python dict literal as `print(dict)` writes it, read without evaluating anything.

    `ast.literal_eval` alone cannot read it: Python prints a NaN or infinite float as the bare
    names `nan` and `inf`, which are not literals, and a NaN loss is exactly the line that must
    not be lost. So the dict is parsed to a tree, those names are read here, and every other
    key and value goes through `ast.literal_eval`, which refuses calls, attributes and names.
    """
    node = ast.parse(line, mode="eval").body
    if not isinstance(node, ast.Dict):
        return None
    result: dict[Any, Any] = {}
    for key_node, value_node in zip(node.keys, node.values, strict=True):
        if key_node is None:  # `{**other}`
            return None
        result[ast.literal_eval(key_node)] = _literal_value(value_node)
    return result


def _literal_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
        return float(node.id)
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Name)
        and node.operand.id == "inf"
    ):
        return -math.inf
    return ast.literal_eval(node)


def _from_mapping(data: dict[Any, Any]) -> ParsedMetric | None:
    if not isinstance(data, dict):
        return None
    if "type" in data and data["type"] != _METRICS_TYPE:
        return None
    if not any(_as_float(data.get(key)) is not None for key in ANCHOR_KEYS):
        return None
    learning_rate = _finite(data.get("learning_rate"))
    if learning_rate is None:
        learning_rate = _finite(data.get("lr"))
    extra = {
        key: number
        for key, value in data.items()
        if isinstance(key, str) and key not in _OWN_KEYS and (number := _finite(value)) is not None
    }
    dropped = tuple(key for key in extra if not storable_text(key))
    for key in dropped:
        del extra[key]
    return _metric(
        step=_step(data.get("step")),
        loss=_as_float(data.get("loss")),
        epoch=_finite(data.get("epoch")),
        learning_rate=learning_rate,
        extra=extra,
        dropped_keys=dropped,
    )


def _from_nanogpt_iter(line: str) -> ParsedMetric | None:
    match = _NANOGPT_ITER.fullmatch(line)
    if match is None:
        return None
    step, loss, time_ms, mfu_pct = match.groups()
    extra: dict[str, float] = {}
    if time_ms is not None and math.isfinite(float(time_ms)):
        extra["time_ms"] = float(time_ms)
    # nanoGPT starts its running MFU at -1 and prints "mfu -100.00%" until it has measured
    # a few iterations; a negative value is that placeholder, not a measurement.
    if mfu_pct is not None and math.isfinite(float(mfu_pct)) and float(mfu_pct) >= 0:
        extra["mfu_pct"] = float(mfu_pct)
    return _metric(
        step=_step(int(step)), loss=float(loss), epoch=None, learning_rate=None, extra=extra
    )


def _from_nanogpt_eval(line: str) -> ParsedMetric | None:
    match = _NANOGPT_EVAL.fullmatch(line)
    if match is None:
        return None
    step, train_loss, val_loss = match.groups()
    extra = {
        key: float(value)
        for key, value in (("train_loss", train_loss), ("val_loss", val_loss))
        if math.isfinite(float(value))
    }
    return _metric(step=_step(int(step)), loss=None, epoch=None, learning_rate=None, extra=extra)


def _metric(
    *,
    step: int | None,
    loss: float | None,
    epoch: float | None,
    learning_rate: float | None,
    extra: dict[str, float],
    dropped_keys: tuple[str, ...] = (),
) -> ParsedMetric | None:
    """A ParsedMetric, or None when nothing usable is left (e.g. `{"step": -1}`)."""
    if step is None and loss is None and epoch is None and learning_rate is None and not extra:
        return None
    return ParsedMetric(
        step=step,
        loss=loss,
        epoch=epoch,
        learning_rate=learning_rate,
        extra=extra,
        dropped_keys=dropped_keys,
    )


def _as_float(value: object) -> float | None:
    """`value` as a float if it is a real number (NaN and infinity included), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return None


def _finite(value: object) -> float | None:
    number = _as_float(value)
    return number if number is not None and math.isfinite(number) else None


def _step(value: object) -> int | None:
    """A non-negative integral step that fits `MetricPoint.step`; 3.0 counts as 3."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return None
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_STEP:
        return value
    return None
