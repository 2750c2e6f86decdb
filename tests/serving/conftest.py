"""Fixtures of the serving tests: the stack's storage, and completed fine-tunes whose
adapters (trained once per session by the real trainer) are stored artifacts. `compute_org`
and `api` are the ones tests/compute_api.py gives every test."""

from __future__ import annotations

import pytest

from apps.accounts import services as account_services
from tests.factories import ProjectFactory
from tests.serving.fixtures import finished_finetune


@pytest.fixture
def stack_storage(settings, live_stack):
    """Artifacts stored by the test where the stack's worker and web server read them."""
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"


@pytest.fixture
def serving_project(compute_org):
    return ProjectFactory(organization=compute_org, name="Support", slug="support")


@pytest.fixture
def tuned(stack_storage, serving_project, tiny_model, tiny_adapters):
    """Two completed fine-tunes of the project: `a` (with a checkpoint) and `b`."""
    return {
        "a": finished_finetune(
            project=serving_project,
            tiny_model=tiny_model,
            adapter_dir=tiny_adapters["a"],
            checkpoint_dir=tiny_adapters["a_checkpoint"],
            name="tuned-a",
        ),
        "b": finished_finetune(
            project=serving_project,
            tiny_model=tiny_model,
            adapter_dir=tiny_adapters["b"],
            name="tuned-b",
        ),
    }


@pytest.fixture
def api_key(compute_org) -> str:
    _, key = account_services.api_key_create(organization=compute_org, name="serving")
    return key
