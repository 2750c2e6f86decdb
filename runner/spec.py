"""The answer of `GET spec` as the runner reads it (`runner.protocol.SpecResponse` is its
shape): lenient on settings, which fall back to the page's defaults; `command` and
`script_b64` are checked when the workload is built (`runner.workload.workload_argv`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.protocol import IMPLICIT_PROTOCOL_VERSION, version_of_spec


class SpecError(Exception):
    """The spec cannot be run (neither or both of command and script_b64, bad base64)."""


@dataclass
class JobSpec:
    """The answer of `GET spec`, with the page's defaults where a setting is missing."""

    job_id: str = ""
    attempt: int = 0
    command: list[str] | None = None
    script_b64: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    mask: list[str] = field(default_factory=list)
    heartbeat_interval_s: float = 5.0
    log_batch_max_lines: int = 1000
    log_batch_max_interval_s: float = 0.25
    # Gzip a log batch of at least this many bytes; None (an older control plane, which
    # reads no compressed body, or one that asks for none): never.
    log_gzip_min_bytes: int | None = None
    terminate_grace_s: float = 10.0
    final_flush_timeout_s: float = 600.0
    resume_from: Any = None  # checked by runner.artifacts.fetch_resume
    inputs: Any = None  # checked by runner.inputs.fetch_inputs
    workdir: Any = None  # the code archive; checked by runner.workdir.prepare_workdir
    files: Any = None  # inline files; checked by runner.workdir.write_files
    # The control plane's hub path (`/hf`) when the runner is to set HF_ENDPOINT; else None.
    hub_path: str | None = None
    # 1 when the spec names none (an older control plane); None when it is not a number.
    protocol_version: int | None = IMPLICIT_PROTOCOL_VERSION

    @classmethod
    def from_json(cls, data: dict) -> JobSpec:
        """Lenient on settings (a bad number falls back to its default); `command`,
        `script_b64` are checked when the workload is built (`workload_argv`)."""
        spec = cls()

        def number(name: str, kind: Callable[[Any], Any], minimum: float) -> None:
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return
            if value >= minimum:
                setattr(spec, name, kind(value))

        spec.job_id = str(data.get("job_id") or "")
        spec.attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else 0
        spec.command = data.get("command")
        spec.script_b64 = data.get("script_b64")
        env = data.get("env") or {}
        if isinstance(env, dict):
            spec.env = {str(k): "" if v is None else str(v) for k, v in env.items()}
        mask = data.get("mask") or []
        if isinstance(mask, list):
            spec.mask = [value for value in mask if isinstance(value, str)]
        number("heartbeat_interval_s", float, 0.05)
        number("log_batch_max_lines", int, 1)
        number("log_batch_max_interval_s", float, 0)
        number("terminate_grace_s", float, 0)
        number("final_flush_timeout_s", float, 0)
        number("log_gzip_min_bytes", int, 0)
        spec.resume_from = data.get("resume_from")
        spec.inputs = data.get("inputs") or None
        spec.workdir = data.get("workdir")
        spec.files = data.get("files") or None
        hub = data.get("hub")
        path = hub.get("path") if isinstance(hub, dict) else None
        if isinstance(path, str) and path.startswith("/") and ".." not in path:
            spec.hub_path = path.rstrip("/")
        spec.protocol_version = version_of_spec(data)
        return spec
