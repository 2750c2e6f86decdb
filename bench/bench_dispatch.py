"""Dispatch latency: submit → `running` through the real stack, against a bare Celery round trip.

- Dispatch: the web server (uvicorn), a Celery worker and Celery beat run as processes
  (`tests.integration.stack.Stack`) on this script's database. `BENCH_DISPATCH_JOBS` jobs
  (default 10) of `sleep 2` are submitted one after another through the compute API; each is
  timed from the POST's response to the first GET that shows `running`, polling every 20 ms.
  Each job finishes before the next is sent (the local offer has two slots). One job before
  them warms the worker and is not counted.
- Baseline: `app.control.ping()` to that worker, median of 20: a message through the same
  Redis broker to the worker and its reply back.

Also printed: the median of each phase, from the job's own timestamps (created → allocating →
provisioning → runner launched → running) and when the poll saw it.

The stack runs with the production timings (reconcile every 5 s and so on), not the shortened
ones the integration tests use. Uses its own database (`trainyard_bench_dispatch`, recreated
each run) and Redis database (`BENCH_DISPATCH_REDIS_URL`, default db 13, flushed). Every
process, and every runner the worker started, is stopped at the end, also on failure.

    .venv/bin/python bench/bench_dispatch.py
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from common import JobsApi, api_key, funded_org
from live_stack import (
    TERMINAL,
    production_stack,
    setup_django,
    stop_runners,
    terminate_unfinished,
)

BENCH_DB = "trainyard_bench_dispatch"
REDIS_URL = os.environ.get("BENCH_DISPATCH_REDIS_URL", "redis://127.0.0.1:6379/13")
JOBS = int(os.environ.get("BENCH_DISPATCH_JOBS", 10))
PINGS = 20
POLL_S = 0.02


def run_one(api: JobsApi) -> tuple[str, float, datetime]:
    """Submit a job; (its id, seconds from the POST's answer to a GET showing `running`, the
    wall-clock time the POST answered). Returns once the job has ended."""
    from django.utils import timezone

    job_id = api.submit("bench-dispatch", ["sleep", "2"])
    answered, start = timezone.now(), time.perf_counter()
    while (state := api.state(job_id)) != "running":
        assert state not in TERMINAL, f"{job_id} ended {state} before it was seen running"
        assert time.perf_counter() - start < 60, f"{job_id} still {state} after 60 s"
        time.sleep(POLL_S)
    took = time.perf_counter() - start
    deadline = time.monotonic() + 60
    while (state := api.state(job_id)) not in TERMINAL:
        assert time.monotonic() < deadline, f"{job_id} still {state} 60 s after it ran"
        time.sleep(0.1)
    assert state == "succeeded", f"{job_id} ended {state}"
    return job_id, took, answered


def phases(job_id: str, answered: datetime, seen_s: float) -> dict[str, float]:
    """Seconds each step took, from the job's own timestamps."""
    from apps.jobs.models import Attempt, Job, JobEvent

    job = Job.objects.get(public_id=job_id)
    entered = dict(
        JobEvent.objects.filter(job=job, type="state_changed")
        .order_by("id")
        .values_list("data__to", "created_at")
    )
    attempt = Attempt.objects.get(job=job, number=1)
    marks = [
        ("API answers", job.created_at, answered),
        ("queued → allocating", answered, entered["allocating"]),
        ("→ provisioning", entered["allocating"], entered["provisioning"]),
        ("→ runner launched", entered["provisioning"], attempt.launched_at),
        ("→ running", attempt.launched_at, entered["running"]),
    ]
    steps = {name: (end - begin).total_seconds() for name, begin, end in marks}
    # Only the API step falls before the POST answered; the rest add up to what was seen.
    steps["→ seen by the poll"] = seen_s - sum(list(steps.values())[1:])
    return steps


def ping_median_ms(worker: str) -> float:
    from config.celery import app

    samples = []
    for _ in range(PINGS + 1):
        start = time.perf_counter()
        replies = app.control.ping(destination=[worker], timeout=5)
        samples.append((time.perf_counter() - start) * 1000)
        assert replies and worker in replies[0], replies
    return statistics.median(samples[1:])  # the first opens the connection


def main() -> int:
    setup_django(BENCH_DB, REDIS_URL)
    key = api_key(funded_org("bench-dispatch"))

    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as workdir:
        stack = production_stack(BENCH_DB, REDIS_URL, Path(workdir))
        api = None
        try:
            stack.start()
            api = JobsApi(stack.url, key)
            worker = f"it-{stack.port}@{socket.gethostname()}"
            run_one(api)  # warm-up: the worker's first task, the web's first job
            runs = [run_one(api) for _ in range(JOBS)]
            ping_ms = ping_median_ms(worker)
        except Exception:
            print(stack.logs(), file=sys.stderr)
            raise
        finally:
            if api is not None:
                terminate_unfinished(api.terminate)
            stack.stop()
            stop_runners()

    dispatch_ms = statistics.median(took for _, took, _ in runs) * 1000
    steps = [phases(job_id, answered, took) for job_id, took, answered in runs]
    names = list(steps[0])
    parts = ", ".join(
        f"{name} {statistics.median(step[name] for step in steps) * 1000:.0f}" for name in names
    )
    spread = sorted(took * 1000 for _, took, _ in runs)
    print(
        f"dispatch ({JOBS} jobs): submit → running median {dispatch_ms:.0f} ms "
        f"(min {spread[0]:.0f}, max {spread[-1]:.0f}); Celery ping round trip median "
        f"{ping_ms:.1f} ms; ratio {dispatch_ms / ping_ms:.0f}"
    )
    print(f"phases, median ms: {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
