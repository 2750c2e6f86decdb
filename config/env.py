"""Tiny helpers that read settings from the environment.

Every name read through them is recorded, so that a test can check that `.env.example` and
`docker-compose.yml` name the same variables that settings actually read.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_NAMES_READ: set[str] = set()
_UNSET = object()


def names_read() -> frozenset[str]:
    """The environment variable names settings have read so far."""
    return frozenset(_NAMES_READ)


def env_str(name: str, default: object = _UNSET) -> str:
    _NAMES_READ.add(name)
    value = os.environ.get(name)
    if value is not None and value != "":
        return value
    if default is _UNSET:
        raise ImproperlyConfigured(f"The environment variable {name} must be set.")
    return default  # type: ignore[return-value]


def env_bool(name: str, default: bool = False) -> bool:
    raw = env_str(name, "")
    if raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}.")


def env_int(name: str, default: int) -> int:
    raw = env_str(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}.") from exc


def env_float(name: str, default: float) -> float:
    raw = env_str(name, "")
    if raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}.") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = env_str(name, "")
    if raw == "":
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]
