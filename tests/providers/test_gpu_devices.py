"""GPU devices per attempt, launched (issue 36, T3-8): dispatch hands the attempt's devices to
the local backend, whose host runner sees only them in CUDA_VISIBLE_DEVICES and whose
container asks the runtime for exactly them. This machine has no GPU: the host runtime's
workloads print what CUDA would be told, and podman, which finds no CDI spec for an NVIDIA
device here, answers with the device the container asked for."""

from __future__ import annotations

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.jobs.execution import dispatch
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from apps.providers.backends import backend_for
from apps.providers.models import Provider
from tests.factories import OrganizationFactory
from tests.jobs.helpers import make_job
from tests.live import wait_until
from tests.providers.helpers import reachable_by_everyone

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

A100 = "nvidia-a100-80gb"
PRINT_DEVICES = "import os; print('cuda', repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"


def _gpus_on_local(config: dict, capacity: int = 2) -> None:
    local = Provider.objects.get(name="local")
    local.config = config
    local.save(update_fields=["config"])
    _gpu_offer(local, capacity)


def _gpu_offer(provider: Provider, capacity: int) -> None:
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name=A100),
        gpu_counts=[1],
        capacity=capacity,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )


def _job(org, command: list[str], image: str = "local", accelerator: str = A100) -> Job:
    compute = {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1}
    return make_job(org, compute=compute, container={"image": image, "command": command})


def _run_to_the_end(job: Job) -> list[str]:
    """Dispatch `job` (allocate and launch, as the worker does), wait for its runner and
    answer the workload's own log lines."""
    dispatch.dispatch(job.pk)
    attempt = Attempt.objects.select_related("provider").get(job=job)
    assert attempt.handle, Job.objects.get(pk=job.pk).error_message
    backend = backend_for(attempt.provider)
    try:
        wait_until(lambda: backend.poll(attempt.handle).state != "running", 60, what="the runner")
    finally:
        backend.release(attempt.handle)
    lines = list(job.log_lines.filter(source="user").values_list("message", flat=True))
    assert lines, list(job.log_lines.values_list("source", "message"))  # why, if none came
    return lines


def test_a_host_runner_sees_only_its_own_gpus_and_a_cpu_one_none(settings, tmp_path, live_server):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    settings.TRAINYARD_PUBLIC_URL = live_server.url
    reachable_by_everyone(tmp_path)
    _gpus_on_local({"runtime": "host", "python": "/usr/bin/python3", "multi_tenant": True})
    org = OrganizationFactory(compute_enabled=True)
    command = ["/usr/bin/python3", "-c", PRINT_DEVICES]
    holder = _job(org, ["sleep", "60"])
    assert dispatch.allocate(holder.pk).gpu_devices == [0]  # placed, holds GPU 0

    assert _run_to_the_end(_job(org, command)) == ["cuda '1'"]
    assert _run_to_the_end(_job(org, command, accelerator="cpu")) == ["cuda ''"]


def test_an_ssh_hosts_runner_sees_only_its_own_gpus(settings, ssh_provider, live_server):
    settings.TRAINYARD_PUBLIC_URL = live_server.url
    _gpu_offer(ssh_provider, capacity=2)
    org = OrganizationFactory(compute_enabled=True)
    assert dispatch.allocate(_job(org, ["sleep", "60"]).pk).gpu_devices == [0]

    assert _run_to_the_end(_job(org, ["/usr/bin/python3", "-c", PRINT_DEVICES])) == ["cuda '1'"]


def test_a_container_asks_the_runtime_for_its_own_gpu_only(
    settings, tmp_path, live_server, podman_image
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    settings.TRAINYARD_PUBLIC_URL = live_server.url
    _gpus_on_local({"runtime": "podman"})
    org = OrganizationFactory(compute_enabled=True)
    holder = _job(org, ["sleep", "60"], image=podman_image)
    assert dispatch.allocate(holder.pk).gpu_devices == [0]

    job = _job(org, ["true"], image=podman_image)
    dispatch.dispatch(job.pk)

    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert attempt.gpu_devices == [1]
    # No GPU here: podman refuses the one device asked for, by name, and the job says so.
    assert (job.state, job.reason) == (JobState.FAILED, "launch_failed")
    assert "nvidia.com/gpu=1" in job.error_message
    assert "gpu=all" not in job.error_message and "gpu=0" not in job.error_message
