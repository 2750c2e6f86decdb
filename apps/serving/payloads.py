"""The serve job: a job of kind `serve` whose workload is the engine (`python -m engine`,
the `train` extra), with the engine's config as JSON in $ENGINE_CONFIG.

Like a fine-tune, the job is an ordinary job underneath — placed, billed per minute and
preempted like any — and its container runs a short script that checks the engine is
installed (a clear message and exit 2 if not). What the job serves for is in $SERVE_FOR:
`endpoint:<ep_…>` or `playground`. The engine's secret is never in the job's spec: it is
derived per attempt and handed over when the runner fetches its spec (`apps.serving.kind`).
"""

from __future__ import annotations

import base64
import json

from apps.jobs.specs import DEFAULT_DISK_GB
from apps.providers import images

CONFIG_ENV = "ENGINE_CONFIG"
FOR_ENV = "SERVE_FOR"
PLAYGROUND = "playground"
ENGINE_MISSING = (
    "The serving engine is not installed on this host: install it with pip install -e '.[train]'"
)
SCRIPT = f"""\
#!/usr/bin/env bash
# An inference server; its config is the JSON in ${CONFIG_ENV}.
set -euo pipefail
if ! python -c 'import engine' >/dev/null 2>&1; then
  echo "{ENGINE_MISSING}" >&2
  exit 2
fi
exec python -m engine --config-json "${CONFIG_ENV}"
"""
DEFAULT_COMPUTE = {
    "accelerator": "cpu",
    "gpu_count": 1,
    "ephemeral_disk_gb": DEFAULT_DISK_GB["serve"],
}
BASE_NAME = "base"  # the base model's served name on every engine


def serve_job_payload(
    *, name: str, project_id: str, base_model: str, serves_for: str, compute: dict | None = None
) -> dict:
    """The job request (as `POST /jobs` takes it) that runs an engine for `base_model`."""
    config = {"base_model": base_model, "served_model_name": BASE_NAME}
    return {
        "name": name,
        "project": project_id,
        "priority_class": "standard",
        "compute": compute or dict(DEFAULT_COMPUTE),
        "container": {
            "image": images.engine_image(),
            "script_b64": base64.b64encode(SCRIPT.encode()).decode(),
            "env": {CONFIG_ENV: json.dumps(config, sort_keys=True), FOR_ENV: serves_for},
        },
    }


def endpoint_for(endpoint_public_id: str) -> str:
    return f"endpoint:{endpoint_public_id}"


def serves_for(job) -> str:
    """`endpoint:<ep_…>` or `playground` for a serve job; "" for another."""
    return str((job.spec or {}).get("container", {}).get("env", {}).get(FOR_ENV, ""))


def base_model_of(job) -> str | None:
    raw = (job.spec or {}).get("container", {}).get("env", {}).get(CONFIG_ENV)
    try:
        return json.loads(raw).get("base_model") if raw else None
    except (ValueError, AttributeError):
        return None
