"""Inputs: files the control plane stores that the workload needs (a fine-tune's uploaded
dataset), fetched before the workload starts (docs/runner-protocol.md, "Inputs").

The spec's `inputs` is a list of `{"path", "download_url", "sha256", "size_bytes"}`. Each file
is downloaded with the runner's token (from the control plane's own origin only) into
`{work}/<path>.part`, checked against `sha256` (when given) and renamed to `{work}/<path>`, so
a relaunched runner finds a whole file or none; a whole one with the right digest is not
downloaded again. `path` must be relative and stay inside the working directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.client import (
    ClientError,
    ControlClient,
    RetryableError,
    StopWhen,
    SupersededError,
    log_retry,
    retrying,
)
from runner.files import sha256_of


class InputError(Exception):
    """An input could not be fetched or used; the workload cannot start without it."""


def _target(work: Path, path: Any) -> Path:
    if not isinstance(path, str) or not path or path.startswith("/") or "\x00" in path:
        raise InputError(f"input path {path!r} is not a relative path")
    if ".." in Path(path).parts:
        raise InputError(f"input path {path!r} leads outside the working directory")
    return work / path


def fetch_inputs(
    client: ControlClient,
    inputs: Any,
    work: Path,
    *,
    deadline: float,
    should_stop: Callable[[], bool],
    sleep: Callable[[float], object],
    on_retry: Callable[[int, RetryableError, float], object] | None = log_retry,
) -> list[Path]:
    """Download every input into `work`; return their paths. Retries while the control plane
    is away, until `deadline` (time.monotonic()) or `should_stop()`. Raises InputError naming
    the input for every failure except SupersededError, which propagates."""
    if not isinstance(inputs, list):
        raise InputError("inputs is not a list")
    stop = StopWhen(should_stop, sleep)
    fetched: list[Path] = []
    for item in inputs:
        if not isinstance(item, dict):
            raise InputError("an input is not an object")
        target = _target(work, item.get("path"))
        url, sha256 = item.get("download_url"), item.get("sha256") or ""
        if not isinstance(url, str) or not url or not isinstance(sha256, str):
            raise InputError(f"input {item.get('path')} needs download_url")
        if target.is_file() and sha256 and sha256_of(target) == sha256.lower():
            fetched.append(target)
            continue
        part = target.with_name(target.name + ".part")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(part, "w+b") as out:
                retrying(
                    lambda out=out, url=url: client.download(url, out),
                    deadline=deadline,
                    stop=stop,
                    on_retry=on_retry,
                )
            if sha256:
                actual = sha256_of(part)
                if actual != sha256.lower():
                    raise InputError(
                        f"input {item['path']}: the download hashes to {actual}, not {sha256}"
                    )
            os.replace(part, target)
        except SupersededError:
            raise
        except ClientError as exc:
            raise InputError(f"input {item['path']}: {exc}") from exc
        except OSError as exc:
            raise InputError(f"input {item['path']}: {exc}") from exc
        finally:
            part.unlink(missing_ok=True)
        fetched.append(target)
    return fetched
