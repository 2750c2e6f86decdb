"""Fixtures of the Playground's page tests: completed fine-tunes whose artifacts are stored
(small real tar.gz packs; the page and the run's checks never open them) in a folder of
the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serving.fixtures import FinishedFinetune, finished_finetune

BASE_MODEL = "acme-labs/tiny-chat"


def _adapter_dir(root: Path, name: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text('{"r": 4}\n')
    return directory


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def make_finetune(media, tmp_path):
    def make(project, name: str = "tuned", base_model: str = BASE_MODEL) -> FinishedFinetune:
        return finished_finetune(
            project=project,
            tiny_model=base_model,
            adapter_dir=_adapter_dir(tmp_path / name, "adapter"),
            checkpoint_dir=_adapter_dir(tmp_path / name, "checkpoint"),
            name=name,
        )

    return make


@pytest.fixture
def tuned(make_finetune, project) -> FinishedFinetune:
    return make_finetune(project)


@pytest.fixture
def foreign(make_finetune, other_project) -> FinishedFinetune:
    """Another organization's completed fine-tune."""
    return make_finetune(other_project, name="secret-tune")
