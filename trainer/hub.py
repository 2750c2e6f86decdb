"""Which hub the trainer fetches a model from.

A workload's HF_ENDPOINT is its control plane's own hub, which holds the organization's
repositories (`TRAINYARD_HUB_NAMESPACE`, given with it): a fine-tune of `<org>/<name>` is
fetched from there with the attempt's HF_TOKEN. A hub id in any other namespace (a public
model such as `Qwen/Qwen2.5-0.5B`) is fetched from huggingface.co, as before the control
plane had a hub: HF_ENDPOINT, and the platform's own token, are dropped from this process
before the Hugging Face libraries read them (a token of the job's own, `hf_…`, stays). A
local directory needs no hub. The dataset, when it is a hub id, follows the model's choice.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from runner.protocol import ENV_HUB_NAMESPACE

PLATFORM_TOKEN_PREFIX = "tyh_"


def choose_hub(model: str, env: MutableMapping[str, str] | None = None) -> str | None:
    """Point this process at the hub that holds `model`; a line saying which, or None when
    there is nothing to choose (a local model, or no platform hub)."""
    env = os.environ if env is None else env
    namespace = env.get(ENV_HUB_NAMESPACE, "")
    if not namespace or not env.get("HF_ENDPOINT"):
        return None
    if model.startswith(("/", ".", "~")) or Path(model).expanduser().exists():
        return None
    if model.split("/", 1)[0] == namespace:
        return f"model {model} comes from this organization's hub"
    env.pop("HF_ENDPOINT", None)
    if env.get("HF_TOKEN", "").startswith(PLATFORM_TOKEN_PREFIX):
        env.pop("HF_TOKEN", None)
    return f"model {model} is not in {namespace}/: it comes from huggingface.co"
