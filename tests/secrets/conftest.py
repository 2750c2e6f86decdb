"""Secrets are created through the service, the way every caller creates them."""

from __future__ import annotations

import pytest

from apps.secrets import services


@pytest.fixture
def make_secret():
    def make(organization, name: str = "hf", data: dict[str, str] | None = None):
        return services.secret_create(
            organization=organization, name=name, data=data or {"HF_TOKEN": "hf_topsecret"}
        )

    return make


@pytest.fixture
def secret(org, make_secret):
    return make_secret(org, "artifact-repository", {"HF_TOKEN": "hf_topsecret", "EXTRA": "xyz"})


@pytest.fixture
def other_secret(other_org, make_secret):
    return make_secret(other_org, "theirs", {"HF_TOKEN": "hf_not_yours"})
