"""The container backend refuses an image that is not a registry reference before it asks
the runtime anything (T3-13): a row that bypassed the API's check still never has podman or
docker open a path of this host."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from apps.providers.backends.base import PermanentBackendError
from apps.providers.backends.containers import (
    ContainerRuntime,
    ImageRefused,
    RunSpec,
    image_reference_problem,
)
from tests.jobs.api.test_image_references import ACCEPTED, REFUSED


@pytest.fixture
def runtime(tmp_path):
    """A runtime whose binary only records its argv (one line per call) and succeeds."""
    calls = tmp_path / "calls"
    binary = tmp_path / "podman"
    binary.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return ContainerRuntime(binary=str(binary))


def _calls(runtime: ContainerRuntime) -> list[str]:
    """What the runtime's binary was asked, one line per call."""
    calls = Path(runtime.binary).with_name("calls")
    return calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("image", [*REFUSED, "", "python:3.11\n", " python"])
def test_the_check_names_every_transport_and_path(image):
    assert image_reference_problem(image)


@pytest.mark.parametrize("image", ACCEPTED)
def test_the_check_passes_registry_references(image):
    assert image_reference_problem(image) is None


@pytest.mark.parametrize(
    "image", ["docker-archive:/etc/hostname", "oci-archive:/etc/shadow", "dir:/etc", "/etc"]
)
def test_ensure_image_refuses_a_transport_without_calling_the_runtime(runtime, image):
    with pytest.raises(ImageRefused) as refused:
        runtime.ensure_image(image, pull_timeout_s=5)

    assert isinstance(refused.value, PermanentBackendError)
    assert refused.value.reason == "spec_invalid"
    assert image in str(refused.value)
    assert _calls(runtime) == []


def test_run_refuses_a_transport_without_calling_the_runtime(runtime, tmp_path):
    spec = RunSpec(
        name="trainyard-job-1-attempt-1",
        image="docker-archive:/etc/hostname",
        workdir=str(tmp_path),
        runner_dir=str(tmp_path),
        env={},
    )

    with pytest.raises(ImageRefused):
        runtime.run(spec, host_env={})

    assert _calls(runtime) == []


def test_a_registry_reference_reaches_the_runtime(runtime):
    runtime.ensure_image("python:3.11-slim", pull_timeout_s=5)

    assert _calls(runtime) == ["image inspect python:3.11-slim"]
