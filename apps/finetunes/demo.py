"""Where `seed_demo` puts the demo fine-tune's base model and datasets (under var/)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def demo_model_dir() -> Path:
    return settings.VAR_DIR / "demo" / "tiny-llama"


def demo_datasets_dir() -> Path:
    return settings.VAR_DIR / "demo" / "datasets"


def demo_finetune_initial() -> dict:
    """The fine-tune form prefilled with the demo model and dataset when they exist, so a
    newcomer's first fine-tune needs no typing."""
    model, dataset = demo_model_dir(), demo_datasets_dir() / "alpaca.jsonl"
    if (model / "config.json").exists() and dataset.exists():
        return {
            "name": "demo-finetune",
            "model": str(model),
            "dataset": str(dataset),
            "max_steps": 40,
        }
    return {}
