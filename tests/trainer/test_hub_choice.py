"""The trainer fetches `<org>/<name>` from its control plane's hub and any other hub id
from huggingface.co, as before the control plane had a hub (trainer/hub.py)."""

from __future__ import annotations

from trainer.hub import choose_hub

PLATFORM = {
    "HF_ENDPOINT": "http://127.0.0.1:8000/hf",
    "HF_TOKEN": "tyh_nonce_mac",
    "TRAINYARD_HUB_NAMESPACE": "acme",
}


def test_a_model_of_the_organization_comes_from_the_platform_hub():
    env = dict(PLATFORM)
    assert "this organization's hub" in choose_hub("acme/tiny-llama", env)
    assert env == PLATFORM


def test_a_public_model_goes_to_huggingface_co_without_the_platform_token():
    env = dict(PLATFORM)
    assert "huggingface.co" in choose_hub("Qwen/Qwen2.5-0.5B", env)
    assert env == {"TRAINYARD_HUB_NAMESPACE": "acme"}


def test_the_job_s_own_token_stays_for_a_public_gated_model():
    env = {**PLATFORM, "HF_TOKEN": "hf_mine"}
    choose_hub("meta-llama/Llama-3.2-1B", env)
    assert env["HF_TOKEN"] == "hf_mine"
    assert "HF_ENDPOINT" not in env


def test_a_local_model_or_an_external_hub_changes_nothing(tmp_path):
    env = dict(PLATFORM)
    assert choose_hub(str(tmp_path), env) is None
    assert env == PLATFORM
    external = {"HF_ENDPOINT": "https://hub.example"}  # TRAINYARD_HF_ENDPOINT: no namespace
    assert choose_hub("Qwen/Qwen2.5-0.5B", external) is None
    assert external == {"HF_ENDPOINT": "https://hub.example"}
