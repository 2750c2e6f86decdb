"""Where the CLI finds its server and API key: `TRAINYARD_URL` / `TRAINYARD_API_KEY` first
(so scripts and CI need no file), else the file `trainyard login` writes.

The file is `$XDG_CONFIG_HOME/trainyard/config.json` (default `~/.config/...`). It holds an
API key, so it is written owner-only (0600) through a temporary file that never exists with
wider permissions, then renamed into place: a crash leaves the old file, never half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "TRAINYARD_URL"
KEY_ENV = "TRAINYARD_API_KEY"


class ConfigError(Exception):
    """The CLI cannot tell which server to call or with which key (a usage error, exit 2)."""


@dataclass(frozen=True)
class Settings:
    url: str
    api_key: str

    def __repr__(self) -> str:  # never show the key, not even in a traceback
        return f"Settings(url={self.url!r}, api_key='***')"


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or ""
    # The XDG spec says a relative value is invalid and must be ignored.
    root = Path(base) if os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".config"
    return root / "trainyard" / "config.json"


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"The URL must start with http:// or https:// (got {url!r}).")
    return url


def read_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object.")
    return data


def load(env: Mapping[str, str] | None = None) -> Settings:
    """The settings to use: each of url and key from the environment when set there, else
    from the config file."""
    env = os.environ if env is None else env
    url, key = env.get(URL_ENV, "").strip(), env.get(KEY_ENV, "").strip()
    if not (url and key):
        stored = read_file(config_path(env))
        url = url or str(stored.get("url") or "")
        key = key or str(stored.get("api_key") or "")
    if not (url and key):
        raise ConfigError(
            f"Not logged in: run `trainyard login --url URL --api-key KEY`, or set {URL_ENV} "
            f"and {KEY_ENV}."
        )
    return Settings(url=normalise_url(url), api_key=key)


def save(settings: Settings, env: Mapping[str, str] | None = None) -> Path:
    """Write the config file owner-only (0600, its folder 0700) and return its path."""
    path = config_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = json.dumps({"url": settings.url, "api_key": settings.api_key}, indent=2) + "\n"
    # mkstemp creates the file 0600; the rename keeps that mode.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(body)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
