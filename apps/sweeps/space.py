"""A sweep's parameter space: which values each trial gets, and the body each trial sends.

Paths are dotted (`learning_rate`, `limits.max_cost_usd`, `container.env.LR`). A grid is the
cartesian product of every parameter's list, in the order the parameters were given (the
last one varies fastest). A random set draws `samples` trials with a seeded generator, so
the same sweep always gets the same trials: from a list, one of its values; from a range
`{"min": a, "max": b}`, a number between them (integers when both bounds are; `"log": true`
draws on a log scale, what learning rates want).
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from typing import Any

from apps.core.errors import InvalidRequest

MAX_TRIALS = 100


def is_range(spec: object) -> bool:
    return isinstance(spec, dict)


def check_param(path: str, spec: object, *, method: str) -> None:
    """A parameter's values are well formed (a non-empty list; for random, also a range);
    raises InvalidRequest naming `params.<path>`."""
    param = f"params.{path}"
    if not path or any(not part for part in path.split(".")):
        raise InvalidRequest("A parameter is a dotted path such as learning_rate.", param=param)
    if isinstance(spec, list):
        if not spec:
            raise InvalidRequest("Give at least one value.", param=param)
        return
    if method == "random" and is_range(spec):
        unknown = sorted(set(spec) - {"min", "max", "log"})
        if unknown:
            raise InvalidRequest(f"Unknown key {unknown[0]!r} in a range.", param=param)
        low, high = spec.get("min"), spec.get("max")
        numbers = (int, float)
        if not all(isinstance(v, numbers) and not isinstance(v, bool) for v in (low, high)):
            raise InvalidRequest("A range needs numbers min and max.", param=param)
        if low > high:
            raise InvalidRequest("A range's min is above its max.", param=param)
        if spec.get("log") and low <= 0:
            raise InvalidRequest("A log range needs min above 0.", param=param)
        return
    shapes = "a list of values" + (" or a range {min, max}" if method == "random" else "")
    raise InvalidRequest(f"Give {shapes}.", param=param)


def edge_values(spec: object) -> list:
    """The values to validate a parameter with before anything is created: a list's every
    value, a range's bounds (every draw lies between them)."""
    if is_range(spec):
        return [spec["min"], spec["max"]]
    return list(spec)


def expand(
    params: dict[str, Any], *, method: str, samples: int | None, seed: int | None
) -> list[dict[str, Any]]:
    """Each trial's values, in trial order."""
    paths = list(params)
    if method == "grid":
        combos = itertools.product(*(params[path] for path in paths))
        return [dict(zip(paths, combo, strict=True)) for combo in combos]
    rng = random.Random(seed)
    return [{path: _draw(rng, params[path]) for path in paths} for _ in range(samples or 0)]


def grid_size(params: dict[str, Any]) -> int:
    return math.prod(len(values) for values in params.values())


def _draw(rng: random.Random, spec: object) -> Any:
    if not is_range(spec):
        return rng.choice(spec)
    low, high = spec["min"], spec["max"]
    if spec.get("log"):
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    if isinstance(low, int) and isinstance(high, int):
        return min(high, max(low, round(value)))
    return float(f"{value:.6g}")  # a learning rate of 0.000213, not 0.00021300451…


def apply(template: dict, values: dict[str, Any]) -> dict:
    """A copy of `template` with each dotted path set to its value. Every object on a path
    but the last key must already be in the template (`limits.max_cost_usd` needs `limits`);
    raises InvalidRequest naming the parameter otherwise."""
    body = copy.deepcopy(template)
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = body
        for depth, key in enumerate(parents):
            node = node.get(key) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                where = ".".join(parents[: depth + 1])
                raise InvalidRequest(
                    f"The template has no object {where!r} to set {path!r} in.",
                    param=f"params.{path}",
                )
        node[leaf] = value
    return body
