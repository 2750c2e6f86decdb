"""What a secret's name and data must look like. Errors are `InvalidRequest` with the
param the API reports (`name`, `data`, `data.MY_KEY`)."""

from __future__ import annotations

import re
from typing import Any

from apps.core.errors import InvalidRequest
from apps.secrets.models import NAME_MAX_LENGTH

NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
# Key names become environment variable names in the workload, so they follow POSIX shells.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_MAX_LENGTH = 128
MAX_KEYS = 100
# Generous for tokens, certificates and small JSON credentials; the whole dict is one row.
MAX_VALUE_LENGTH = 65_536


def validate_name(name: Any) -> str:
    """The name, unchanged, when it is 1..100 characters of `[A-Za-z0-9_.-]`."""
    if not isinstance(name, str) or not name:
        raise InvalidRequest("The name must be a non-empty string.", param="name")
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidRequest(
            f"The name must be at most {NAME_MAX_LENGTH} characters.", param="name"
        )
    if not NAME_RE.fullmatch(name):
        raise InvalidRequest(
            "The name may contain only letters, digits, '_', '.' and '-'.", param="name"
        )
    return name


def is_env_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and len(name) <= ENV_NAME_MAX_LENGTH
        and ENV_NAME_RE.fullmatch(name) is not None
    )


def validate_data(data: Any) -> dict[str, str]:
    """A copy of `data` when it is a non-empty dict of environment-variable names to strings.

    Empty strings are allowed (an empty environment variable is legal); NUL characters are
    not, because no process can receive them in its environment."""
    if not isinstance(data, dict) or not data:
        raise InvalidRequest("data must be a non-empty object of KEY: value.", param="data")
    if len(data) > MAX_KEYS:
        raise InvalidRequest(f"A secret holds at most {MAX_KEYS} keys.", param="data")
    for key, value in data.items():
        if not is_env_name(key):
            raise InvalidRequest(
                "Key names must match [A-Za-z_][A-Za-z0-9_]* "
                f"(at most {ENV_NAME_MAX_LENGTH} characters).",
                param=f"data.{key}",
            )
        if not isinstance(value, str):
            raise InvalidRequest("Values must be strings.", param=f"data.{key}")
        if len(value) > MAX_VALUE_LENGTH:
            raise InvalidRequest(
                f"Values must be at most {MAX_VALUE_LENGTH} characters.", param=f"data.{key}"
            )
        if "\x00" in value:
            raise InvalidRequest("Values must not contain NUL characters.", param=f"data.{key}")
    return dict(data)
