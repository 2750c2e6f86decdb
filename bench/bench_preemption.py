"""Preemption: how much work a preemption loses, and how long a preempted job waits for a free
slot, through the real stack (web, Celery worker and beat, runners, the trainer) with the
production timings (heartbeats every 5 s, reconcile every 5 s, 10 s grace).

- Work lost: a preemptible fine-tune of the tiny model (`max_steps` 40, a checkpoint every
  `SAVE_STEPS`) on a one-slot offer. Once its step-8 checkpoint is uploaded, either a standard
  job displaces it (graceful: `checkpoint_and_exit`, the trainer saves at the current step) or,
  half an interval later, its runner's process group is SIGKILLed (hard: no grace, it resumes
  from the last upload).
  Steps recomputed = the last step the first attempt's trainer printed (read from its runner's
  on-disk spool, which keeps what a SIGKILL stopped from being sent) minus the step the second
  attempt resumed from, against the checkpoint interval (it should be at most one interval).
- Re-placement: a preemptible `sleep` job on the two-slot cpu offer is reclaimed through the
  operator API `RUNS` times; each time, from the job entering `preempted` to its next attempt
  `running` (both from the job's own events). Baseline, same run: a new job's submit to
  `running` (created → running from its events).

Uses its own database (`trainyard_bench_preemption`, recreated) and Redis db 13 (flushed).

    .venv/bin/python bench/bench_preemption.py
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from pathlib import Path

from common import api_key, funded_org
from live_stack import (
    TERMINAL,
    production_stack,
    setup_django,
    stop_runners,
    terminate_unfinished,
)

BENCH_DB = "trainyard_bench_preemption"
REDIS_URL = os.environ.get("BENCH_PREEMPTION_REDIS_URL", "redis://127.0.0.1:6379/13")
RUNS = int(os.environ.get("BENCH_PREEMPTION_RUNS", 5))
SAVE_STEPS = 4
MAX_STEPS = 40


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return result


class Api:
    def __init__(self, base: str, key: str) -> None:
        import requests

        self.base = base
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def post(self, path: str, body: dict | None = None, *, status: int = 201) -> dict:
        response = self.session.post(
            f"{self.base}{path}",
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=10,
        )
        assert response.status_code == status, response.text
        return response.json()

    def job(self, job_id: str) -> dict:
        return self.session.get(f"{self.base}/api/v1/compute/jobs/{job_id}", timeout=10).json()

    def wait_state(self, job_id: str, states: set[str], timeout: float = 300) -> dict:
        return wait(
            lambda: (job := self.job(job_id))["state"] in states and job, timeout, f"{states}"
        )

    def container(self, command: list[str], *, priority: str, accelerator: str = "cpu") -> str:
        body = {
            "name": "bench-preemption",
            "priority_class": priority,
            "compute": {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": command},
        }
        return self.post("/api/v1/compute/jobs", body)["id"]


def one_slot_accelerator() -> str:
    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    accelerator = Accelerator.objects.create(
        name="bench-solo", display_name="One slot", vendor="cpu", gpu_counts=[1]
    )
    Offer.objects.create(
        provider=Provider.objects.get(name="local"),
        accelerator=accelerator,
        gpu_counts=[1],
        capacity=1,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )
    return accelerator.name


def steps_recomputed(api: Api, project: str, data: dict, accelerator: str, *, hard: bool) -> int:
    """Run a fine-tune, preempt it after its step-8 checkpoint, wait for it to succeed; the
    steps its second attempt trained again."""
    from apps.jobs.models import Artifact, Attempt, JobEvent, MetricPoint

    job_id = api.post(
        f"/api/v1/projects/{project}/finetunes",
        {
            "name": "bench-lora",
            **data,
            "max_steps": MAX_STEPS,
            "save_steps": SAVE_STEPS,
            "learning_rate": 0.003,
            "priority_class": "preemptible",
            "compute": {"accelerator": accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
        },
    )["id"]
    wait(
        lambda: Artifact.objects.filter(job__public_id=job_id, step__gte=8).exists(),
        300,
        "a step-8 checkpoint",
    )
    if hard:
        # Half an interval past the checkpoint: a kill lands anywhere between two saves.
        wait(
            lambda: MetricPoint.objects.filter(
                job__public_id=job_id, step__gte=8 + SAVE_STEPS // 2
            ).exists(),
            120,
            "two more steps",
        )
        handle = Attempt.objects.get(job__public_id=job_id, number=1).handle
        os.killpg(handle["pgid"], signal.SIGKILL)
    else:
        api.container(["true"], priority="standard", accelerator=accelerator)
    done = api.wait_state(job_id, TERMINAL, timeout=600)
    assert done["state"] == "succeeded", done
    resumed = JobEvent.objects.get(job__public_id=job_id, type="resumed_from_checkpoint")
    return step_reached(Attempt.objects.get(job__public_id=job_id, number=1)) - resumed.data["step"]


def step_reached(attempt) -> int:
    """The last step the attempt's trainer printed, from its runner's on-disk spool: lines a
    SIGKILL kept from reaching the control plane are still there."""
    from apps.jobs.telemetry.metrics import parse_metric_line

    steps = [0]
    spool = Path(attempt.handle["workdir"]) / "spool.jsonl"
    for raw in spool.read_text().splitlines():
        with suppress(ValueError):
            point = parse_metric_line(json.loads(raw)["message"])
            if point is not None and point.step is not None:
                steps.append(point.step)
    return max(steps)


def preempted_to_running(job_id: str, attempt: int) -> float:
    """Seconds from the job's last `preempted` to `attempt` running, from its events."""
    from apps.jobs.models import JobEvent

    changes = list(
        JobEvent.objects.filter(job__public_id=job_id, type="state_changed")
        .order_by("id")
        .values_list("data__to", "attempt", "created_at")
    )
    preempted = [at for to, _, at in changes if to == "preempted"][-1]
    running = next(at for to, n, at in changes if to == "running" and n == attempt)
    return (running - preempted).total_seconds()


def main() -> int:
    setup_django(BENCH_DB, REDIS_URL)
    from apps.accounts.models import User
    from apps.projects.models import Project
    from trainer.demo_data import write_demo_datasets
    from trainer.tiny import build_tiny_model

    org = funded_org("bench-pre")
    key = api_key(org)
    staff = User.objects.create_user("bench-operator", is_staff=True)
    operator_key = api_key(org, "ops", created_by=staff)
    project = Project.objects.create(organization=org, name="Bench", slug="bench")
    accelerator = one_slot_accelerator()

    with tempfile.TemporaryDirectory(prefix="bench-preemption-") as workdir:
        model = build_tiny_model(Path(workdir) / "model")
        data = write_demo_datasets(Path(workdir) / "data")
        training = {"model": str(model), "dataset": str(data["alpaca"]), "dataset_format": "alpaca"}
        stack = production_stack(BENCH_DB, REDIS_URL, Path(workdir))
        api = None
        try:
            stack.start()
            api = Api(stack.url, key)
            operator = Api(stack.url, operator_key)
            graceful = steps_recomputed(api, project.public_id, training, accelerator, hard=False)
            hard = steps_recomputed(api, project.public_id, training, accelerator, hard=True)

            replaced, fresh = [], []
            job_id = api.container(["sleep", "600"], priority="preemptible")
            for attempt in range(2, RUNS + 2):
                wait(
                    lambda n=attempt - 1: (
                        (job := api.job(job_id))["state"] == "running"
                        and len(job["attempts"]) == n
                        and job["attempts"][-1]["started_at"]
                    ),
                    120,
                    "the job running",
                )
                operator.post(f"/api/v1/operator/jobs/{job_id}/reclaim", status=202)
                wait(
                    lambda n=attempt: (
                        (job := api.job(job_id))["state"] == "running" and len(job["attempts"]) == n
                    ),
                    120,
                    "the job running again",
                )
                replaced.append(preempted_to_running(job_id, attempt))
                new_job = api.container(["sleep", "1"], priority="standard")
                api.wait_state(new_job, {"succeeded"}, timeout=120)
                fresh.append(submitted_to_running(new_job))
        except Exception:
            print(stack.logs(), file=sys.stderr)
            raise
        finally:
            if api is not None:
                terminate_unfinished(
                    lambda left: api.post(f"/api/v1/compute/jobs/{left}/terminate", status=200)
                )
            stack.stop()
            stop_runners()

    print(
        f"work lost per preemption (checkpoint every {SAVE_STEPS} steps): graceful displacement "
        f"recomputed {graceful} steps ({graceful / SAVE_STEPS:.2f} intervals); hard kill "
        f"recomputed {hard} steps ({hard / SAVE_STEPS:.2f} intervals)"
    )
    replaced_ms = statistics.median(replaced) * 1000
    fresh_ms = statistics.median(fresh) * 1000
    print(
        f"re-placement on a free slot ({RUNS} reclaims): preempted → running median "
        f"{replaced_ms:.0f} ms; a new job's submit → running median {fresh_ms:.0f} ms; "
        f"ratio {replaced_ms / fresh_ms:.2f}"
    )
    return 0


def submitted_to_running(job_id: str) -> float:
    from apps.jobs.models import Job, JobEvent

    job = Job.objects.get(public_id=job_id)
    running = JobEvent.objects.get(job=job, type="state_changed", data__to="running")
    return (running.created_at - job.created_at).total_seconds()


if __name__ == "__main__":
    sys.exit(main())
