"""The fine-tune configuration: a JSON object, read from a file or from the command line.

The dashboard's fine-tune form sends `model`, `dataset`, `dataset_format`, `max_samples`,
`max_steps` and `learning_rate` (`apps.jobs.forms.FinetuneJobForm.config`); every other key
has a default. Unknown keys are an error, so a misspelt option never silently does nothing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from runner.protocol import ENV_CHECKPOINT_DIR
from trainer.formats import FORMATS


class ConfigError(Exception):
    """The configuration cannot be used; the message names every problem. The CLI exits 2."""


@dataclass(frozen=True)
class TrainConfig:
    model: str  # a hub id or a local directory
    dataset: str  # a local .jsonl/.json/.csv file, or a hub dataset id
    dataset_format: str = "alpaca"
    max_samples: int | None = None  # None: every row
    max_steps: int | None = None  # None: train for num_epochs
    num_epochs: float = 1.0
    learning_rate: float = 2e-4
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    lora_target_modules: tuple[str, ...] | None = None  # None: chosen by architecture
    max_length: int = 512
    batch_size: int = 4
    gradient_accumulation: int = 1
    save_steps: int = 10
    save_total_limit: int | None = None  # None: keep every checkpoint
    logging_steps: int = 1
    eval_fraction: float = 0.1
    seed: int = 42
    # Also write the base model with the adapter merged in (`merged/`), for the runner to
    # upload: what a runtime without LoRA support loads.
    merge: bool = False
    output_dir: str = "output"  # absolute once loaded

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
    ) -> TrainConfig:
        """Validate `data` and fill in defaults; `output_dir` defaults to
        `$TRAINYARD_CHECKPOINT_DIR`, else `./output`, and is made absolute.

        Raises ConfigError naming every bad or unknown key at once.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"the config must be a JSON object, got {_kind(data)}")
        env = os.environ if environ is None else environ
        errors: list[str] = []
        known = {field.name for field in fields(cls)}
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            errors.append("unknown key(s): " + ", ".join(unknown))

        values: dict[str, Any] = {}
        for name in ("model", "dataset"):
            value = data.get(name)
            if not isinstance(value, str) or not value.strip():
                errors.append(f"'{name}' is required and must be a non-empty string")
            else:
                values[name] = value.strip()

        dataset_format = data.get("dataset_format", cls.dataset_format)
        if dataset_format not in FORMATS:
            errors.append(f"'dataset_format' must be one of {', '.join(FORMATS)}")
        else:
            values["dataset_format"] = dataset_format

        checks: list[tuple[str, Any, bool]] = [
            # name, checker, may be null
            ("max_samples", _positive_int, True),
            ("max_steps", _positive_int, True),
            ("num_epochs", _positive_number, False),
            ("learning_rate", _positive_number, False),
            ("lora_r", _positive_int, False),
            ("lora_alpha", _positive_number, False),
            ("lora_dropout", _fraction_from_zero, False),
            ("max_length", _length, False),
            ("batch_size", _positive_int, False),
            ("gradient_accumulation", _positive_int, False),
            ("save_steps", _positive_int, False),
            ("save_total_limit", _positive_int, True),
            ("logging_steps", _positive_int, False),
            ("eval_fraction", _open_fraction, False),
            ("seed", _non_negative_int, False),
        ]
        for name, check, nullable in checks:
            if name not in data:
                continue
            value = data[name]
            if value is None and nullable:
                values[name] = None
                continue
            problem = check(value)
            if problem:
                errors.append(f"'{name}' {problem}")
            else:
                values[name] = float(value) if check is _positive_number else value

        if "merge" in data:
            if not isinstance(data["merge"], bool):
                errors.append("'merge' must be true or false")
            else:
                values["merge"] = data["merge"]

        if data.get("lora_target_modules") is not None:
            modules = data["lora_target_modules"]
            if isinstance(modules, str):
                modules = [part.strip() for part in modules.split(",") if part.strip()]
            if (
                not isinstance(modules, list)
                or not modules
                or not all(isinstance(item, str) and item for item in modules)
            ):
                errors.append(
                    "'lora_target_modules' must be a non-empty list of module names "
                    "or a comma-separated string"
                )
            else:
                values["lora_target_modules"] = tuple(modules)

        output_dir = data.get("output_dir")
        if output_dir is not None and (not isinstance(output_dir, str) or not output_dir):
            errors.append("'output_dir' must be a non-empty string")
            output_dir = None
        output_dir = output_dir or env.get(ENV_CHECKPOINT_DIR, "").strip() or cls.output_dir
        values["output_dir"] = str(Path(output_dir).expanduser().absolute())

        if errors:
            raise ConfigError("invalid config: " + "; ".join(errors))
        return cls(**values)


def load_config(
    *,
    path: str | None = None,
    json_text: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> TrainConfig:
    """The config from a JSON file (`path`) or a JSON string (`json_text`), exactly one."""
    if (path is None) == (json_text is None):
        raise ConfigError("give exactly one of --config and --config-json")
    if path is not None:
        try:
            json_text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    assert json_text is not None
    if not json_text.strip():
        raise ConfigError("the config is empty")
    try:
        data = json.loads(json_text)
    except ValueError as error:
        raise ConfigError(f"the config is not valid JSON: {error}") from None
    return TrainConfig.from_dict(data, environ=environ)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _positive_int(value: object) -> str | None:
    return None if _is_int(value) and value > 0 else "must be a whole number of at least 1"


def _non_negative_int(value: object) -> str | None:
    return None if _is_int(value) and value >= 0 else "must be a whole number of at least 0"


def _length(value: object) -> str | None:
    return None if _is_int(value) and value >= 8 else "must be a whole number of at least 8"


def _positive_number(value: object) -> str | None:
    return None if _is_number(value) and value > 0 else "must be a number greater than 0"


def _fraction_from_zero(value: object) -> str | None:
    return None if _is_number(value) and 0 <= value < 1 else "must be a number in [0, 1)"


def _open_fraction(value: object) -> str | None:
    return None if _is_number(value) and 0 < value < 1 else "must be a number in (0, 1)"
