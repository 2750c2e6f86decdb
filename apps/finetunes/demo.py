"""Where `seed_demo` puts the demo fine-tune's base model and datasets (under var/), and the
credits it grants the demo organization."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from apps.accounts.models import Organization
from apps.billing import ledger
from apps.billing.models import Transfer
from apps.core.money import usd_to_micros

# Enough for many demo jobs at the local provider's prices; granted once per organization.
DEMO_CREDITS_USD = 100


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


def grant_demo_credits(organization: Organization) -> Transfer:
    """Grant the demo organization its credits, once: every job places a hold at submit, so
    without them `make run`'s first job would be refused `insufficient_balance`. The key is
    fixed per organization, so running `seed_demo` again grants nothing more."""
    return ledger.grant(
        organization=organization,
        amount_micros=usd_to_micros(DEMO_CREDITS_USD),
        idempotency_key=f"seed-demo-grant:{organization.slug}",
        memo="demo credits (seed_demo)",
    )
