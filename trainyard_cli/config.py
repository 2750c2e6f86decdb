"""Where the CLI finds its server and API key: `TRAINYARD_URL` / `TRAINYARD_API_KEY` first
(so scripts and CI need no file), else the file `trainyard login` writes. A key is never
taken from the command line (argv shows in `ps` and shell history). Plain `http://` is
refused unless the host is this machine's loopback, or `--insecure` was given (`login
--insecure` stores that choice beside the URL it was made for).

The file is `$XDG_CONFIG_HOME/trainyard/config.json` (default `~/.config/...`). It holds an
API key, so it is written owner-only (0600) through a temporary file that never exists with
wider permissions, then renamed into place: a crash leaves the old file, never half a file.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

URL_ENV = "TRAINYARD_URL"
KEY_ENV = "TRAINYARD_API_KEY"


class ConfigError(Exception):
    """The CLI cannot tell which server to call or with which key (a usage error, exit 2)."""


@dataclass(frozen=True)
class Settings:
    url: str
    api_key: str
    insecure: bool = False  # plain http:// to another host was allowed (`--insecure`)

    def __repr__(self) -> str:  # never show the key, not even in a traceback
        return f"Settings(url={self.url!r}, api_key='***', insecure={self.insecure!r})"


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or ""
    # The XDG spec says a relative value is invalid and must be ignored.
    root = Path(base) if os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".config"
    return root / "trainyard" / "config.json"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalise_url(url: str, *, insecure: bool = False) -> str:
    """`url` without its trailing slash; ConfigError for another scheme, or for plain http://
    to a host other than loopback (127.0.0.1, ::1, localhost) unless `insecure`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"The URL must start with http:// or https:// (got {url!r}).")
    if url.startswith("http://") and not insecure:
        try:
            host = urlsplit(url).hostname or ""
        except ValueError as exc:
            raise ConfigError(f"Not a URL: {url!r} ({exc}).") from exc
        if not is_loopback(host):
            raise ConfigError(
                f"Refusing plain http:// to {host or url}: the API key would travel in "
                "clear. Use https://, or pass --insecure to accept that."
            )
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


def load(env: Mapping[str, str] | None = None, *, insecure: bool = False) -> Settings:
    """The settings to use: each of url and key from the environment when set there, else
    from the config file. The file's `insecure` holds only for the file's own URL."""
    env = os.environ if env is None else env
    url, key = env.get(URL_ENV, "").strip(), env.get(KEY_ENV, "").strip()
    if not (url and key):
        stored = read_file(config_path(env))
        if not url:
            url = str(stored.get("url") or "")
            insecure = insecure or stored.get("insecure") is True
        key = key or str(stored.get("api_key") or "")
    if not (url and key):
        raise ConfigError(
            f"Not logged in: run `trainyard login --url URL` (it asks for the key), or set "
            f"{URL_ENV} and {KEY_ENV}."
        )
    return Settings(url=normalise_url(url, insecure=insecure), api_key=key, insecure=insecure)


def save(settings: Settings, env: Mapping[str, str] | None = None) -> Path:
    """Write the config file owner-only (0600, its folder 0700) and return its path."""
    path = config_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    stored: dict[str, object] = {"url": settings.url, "api_key": settings.api_key}
    if settings.insecure:
        stored["insecure"] = True
    body = json.dumps(stored, indent=2) + "\n"
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
