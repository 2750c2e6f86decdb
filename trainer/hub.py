"""Which hub the trainer fetches a model or a dataset from, and at which revision.

A workload's HF_ENDPOINT is its control plane's own hub, which holds the organization's
repositories (`TRAINYARD_HUB_NAMESPACE`, given with it): a fine-tune of `<org>/<name>` is
fetched from there with the attempt's HF_TOKEN. A hub id in any other namespace (a public
model such as `Qwen/Qwen2.5-0.5B`) is fetched from huggingface.co, as before the control
plane had a hub: HF_ENDPOINT, and the platform's own token, are dropped from this process
before the Hugging Face libraries read them (a token of the job's own, `hf_…`, stays). A
local directory needs no hub.

Either may name a revision, `<org>/<name>@<branch, tag or commit>`. A dataset is chosen on
its own: `<org>/<name>` from the platform's hub even when the model came from
huggingface.co, any other id from huggingface.co.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from runner.protocol import ENV_HUB_NAMESPACE, hub_reference

PLATFORM_TOKEN_PREFIX = "tyh_"


@dataclass(frozen=True)
class PlatformHub:
    endpoint: str
    token: str | None
    namespace: str


_platform: PlatformHub | None = None


def platform_hub() -> PlatformHub | None:
    """The control plane's hub as this process was given it (before `choose_hub` dropped it
    for a model from elsewhere)."""
    if _platform is not None:
        return _platform
    return _read_platform(os.environ)


def _read_platform(env: MutableMapping[str, str]) -> PlatformHub | None:
    namespace, endpoint = env.get(ENV_HUB_NAMESPACE, ""), env.get("HF_ENDPOINT", "")
    if not namespace or not endpoint:
        return None
    return PlatformHub(endpoint=endpoint, token=env.get("HF_TOKEN") or None, namespace=namespace)


def is_local(value: str) -> bool:
    return value.startswith(("/", ".", "~")) or Path(value).expanduser().exists()


def model_reference(value: str) -> tuple[str, str | None]:
    """(what `from_pretrained` loads, the revision or None); a local path is taken whole."""
    return (value, None) if is_local(value) else hub_reference(value)


def choose_hub(model: str, env: MutableMapping[str, str] | None = None) -> str | None:
    """Point this process at the hub that holds `model`; a line saying which, or None when
    there is nothing to choose (a local model, or no platform hub)."""
    global _platform
    env = os.environ if env is None else env
    platform = _read_platform(env)
    if platform is None or is_local(model):
        return None
    if env is os.environ:
        _platform = platform
    repo_id, _ = hub_reference(model)
    if repo_id.split("/", 1)[0] == platform.namespace:
        return f"model {model} comes from this organization's hub"
    env.pop("HF_ENDPOINT", None)
    if env.get("HF_TOKEN", "").startswith(PLATFORM_TOKEN_PREFIX):
        env.pop("HF_TOKEN", None)
    return f"model {model} is not in {platform.namespace}/: it comes from huggingface.co"


def hub_for(repo_id: str) -> tuple[str | None, str | None]:
    """(endpoint, token) for a repository: the platform's hub for its own namespace, else
    huggingface.co (None: the library's default) with the job's own token, if any."""
    platform = platform_hub()
    if platform is not None and repo_id.split("/", 1)[0] == platform.namespace:
        return platform.endpoint, platform.token
    token = os.environ.get("HF_TOKEN", "")
    return None, (token if token and not token.startswith(PLATFORM_TOKEN_PREFIX) else None)
