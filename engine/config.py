"""The engine's configuration: one JSON object, given as `--config-json`.

`base_model` is required; every other key has a default. Unknown keys are an error, as in the
trainer's config, so a misspelt option never silently does nothing. `adapters_dir` is made
absolute against the working directory when the config is read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

# Served names (the base's and every adapter's) and upload names.
NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,100}")
# peft's name for "no adapter" in `adapter_names`: no served name may take it.
PEFT_BASE_NAME = "__base__"
DTYPES = ("float32", "bfloat16", "float16", "auto")
BACKENDS = ("transformers", "vllm")


class ConfigError(Exception):
    """The configuration cannot be used; the message names every problem. The CLI exits 2."""


def valid_name(name: object) -> bool:
    """True for a string that may be a served name: `[A-Za-z0-9._-]{1,100}`, not `__base__`,
    and not `.` or `..` (it names a directory under `adapters_dir`)."""
    return (
        isinstance(name, str)
        and NAME_PATTERN.fullmatch(name) is not None
        and name not in (PEFT_BASE_NAME, ".", "..")
    )


@dataclass(frozen=True)
class EngineConfig:
    base_model: str  # a local directory or a hub id
    served_model_name: str = "base"
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port; the `serving` line says which
    max_batch: int = 8
    max_loras: int = 8  # adapters whose weights may be resident at once (draining ones count)
    adapters_dir: str = "adapters"  # absolute once loaded
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    dtype: str = "float32"
    backend: str = "transformers"  # or "vllm": see engine.vllm
    max_lora_rank: int = 64  # vllm only: its --max-lora-rank

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Validate `data` and fill in defaults. Raises ConfigError naming every bad key."""
        if not isinstance(data, Mapping):
            raise ConfigError("the config must be a JSON object")
        errors: list[str] = []
        known = {field.name for field in fields(cls)}
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            errors.append("unknown key(s): " + ", ".join(unknown))
        values: dict[str, Any] = {}

        base = data.get("base_model")
        if not isinstance(base, str) or not base.strip():
            errors.append("'base_model' is required and must be a non-empty string")
        else:
            values["base_model"] = base.strip()

        def check(name: str, ok, problem: str, *, nullable: bool = False) -> None:
            if name not in data:
                return
            value = data[name]
            if (value is None and nullable) or ok(value):
                values[name] = value
            else:
                errors.append(f"'{name}' {problem}")

        check("served_model_name", valid_name, "must match [A-Za-z0-9._-]{1,100}")
        check("host", lambda v: isinstance(v, str) and v != "", "must be a non-empty string")
        check("port", lambda v: _is_int(v) and 0 <= v <= 65535, "must be a port (0 to 65535)")
        check("max_batch", lambda v: _is_int(v) and v >= 1, "must be a whole number of at least 1")
        check("max_loras", lambda v: _is_int(v) and v >= 0, "must be a whole number of at least 0")
        check(
            "adapters_dir", lambda v: isinstance(v, str) and v != "", "must be a non-empty string"
        )
        check(
            "max_model_len",
            lambda v: _is_int(v) and v >= 2,
            "must be a whole number of at least 2",
            nullable=True,
        )
        check("dtype", lambda v: v in DTYPES, "must be one of " + ", ".join(DTYPES))
        check("backend", lambda v: v in BACKENDS, "must be one of " + ", ".join(BACKENDS))
        check(
            "max_lora_rank", lambda v: _is_int(v) and v >= 1, "must be a whole number of at least 1"
        )

        if errors:
            raise ConfigError("invalid config: " + "; ".join(errors))
        adapters_dir = values.get("adapters_dir", cls.adapters_dir)
        values["adapters_dir"] = str(Path(adapters_dir).expanduser().absolute())
        return cls(**values)


def load_config(json_text: str) -> EngineConfig:
    """The config in `json_text`, or ConfigError."""
    if not json_text.strip():
        raise ConfigError("the config is empty")
    try:
        data = json.loads(json_text)
    except ValueError as error:
        raise ConfigError(f"the config is not valid JSON: {error}") from None
    return EngineConfig.from_dict(data)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite int or float, not a bool."""
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
