"""The reconcile pass alone, in this process, at N live attempts (#19's growth target).

`bench_scale.py` measures the pass inside the whole stack, where a pass at 100 attempts is a
few tens of milliseconds and its neighbours' load moves it run to run. Here nothing else
runs: for each level N (`BENCH_RECONCILE_LEVELS`, default 100,1000) N jobs of one
organization are made `running` through the real services on a local host provider (one
multi-tenant cpu offer), each attempt's handle naming one real `sleep` process (so the
backend's poll reads /proc as it does for a runner), their billing started 0 to 59 s ago, one
second apart, so that about one job in twelve crosses a whole minute in every 5 s — as at
scale, where the pass bills the jobs a minute has accrued on. Then `BENCH_RECONCILE_PASSES`
passes (default 8) run every `BENCH_RECONCILE_TICK_S` (default 5, the production tick);
before each, every attempt's heartbeat is marked (as a relay's beat bundle does).

Prints, per level: the pass's wall time p50 / max, its CPU time p50, its SQL statements
p50, and the ratio of the p50s at the largest level to the smallest (target ≤ 12 at 1,000 ÷
100: the cost per live attempt flat). Own database (`trainyard_bench_reconcile`) and Redis
db 7 (`BENCH_RECONCILE_REDIS_URL`, flushed).

    .venv/bin/python bench/bench_reconcile.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

BENCH_DB = "trainyard_bench_reconcile"
REDIS_URL = os.environ.get("BENCH_RECONCILE_REDIS_URL", "redis://127.0.0.1:6379/7")
LEVELS = [int(n) for n in os.environ.get("BENCH_RECONCILE_LEVELS", "100,1000").split(",") if n]
PASSES = int(os.environ.get("BENCH_RECONCILE_PASSES", 8))
TICK_S = float(os.environ.get("BENCH_RECONCILE_TICK_S", 5))
# A file to write the largest level's passes' cProfile to (pstats), for finding the next fix.
PROFILE = os.environ.get("BENCH_RECONCILE_PROFILE", "")
PRICE_MICROS = 10_000


def setup(workdir: Path):
    """An organization with credits and a local host provider with one roomy cpu offer."""
    from common import funded_org

    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    org = funded_org("bench-reconcile", credits_micros=10**13)
    Offer.objects.update(enabled=False)
    provider = Provider.objects.create(
        name="bench-reconcile",
        kind=Provider.Kind.LOCAL,
        config={"runtime": "host", "multi_tenant": True, "work_dir": str(workdir)},
    )
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=sum(LEVELS) + 10,
        price_per_gpu_hour_micros=PRICE_MICROS,
        min_price_per_gpu_hour_micros=PRICE_MICROS,
        max_price_per_gpu_hour_micros=PRICE_MICROS,
    )
    return org


def make_running(org, n: int, runner: subprocess.Popen, workdir: Path) -> list[int]:
    """`n` jobs moved to `running` through the services, each attempt launched with a handle
    naming `runner`, billing started 0 to 59 s ago."""
    from django.db import transaction
    from django.utils import timezone

    from apps.jobs import services
    from apps.jobs.execution import dispatch
    from apps.jobs.execution.attempts import start_billing
    from apps.jobs.models import Job
    from apps.jobs.states import JobState
    from runner import procfs
    from tests.jobs.helpers import make_job

    ticks = procfs.stat(runner.pid).start_ticks
    compute = {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10}
    ids = []
    for i in range(n):
        job = make_job(org, compute=compute)
        assert dispatch.allocate(job.pk) is not None, "the offer has no room"
        for step in (JobState.PROVISIONING, JobState.RUNNING):
            services.job_transition(job_id=job.pk, to=step)
        now = timezone.now()
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job.pk)
            attempt = job.attempts.get()
            attempt.handle = {
                "pid": runner.pid,
                "pgid": runner.pid,
                "start_ticks": ticks,
                "workdir": str(workdir),
                "markers": [],
            }
            attempt.launched_at = attempt.started_at = attempt.last_heartbeat_at = now
            attempt.save(update_fields=["handle", "launched_at", "started_at", "last_heartbeat_at"])
            start_billing(job, attempt, now - timedelta(seconds=i % 60))
        ids.append(job.pk)
    return ids


def level(org, n: int, workdir: Path, profile: str = "") -> dict:
    import cProfile

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from apps.jobs.execution.reconcile import reconcile
    from apps.jobs.models import Attempt

    runner = subprocess.Popen(["sleep", "100000"])
    try:
        make_running(org, n, runner, workdir)
        reconcile()  # settles what setting up left (meters, spend), as the first pass does
        walls, cpus, statements, summaries = [], [], [], []
        profiler = cProfile.Profile() if profile else None
        next_at = time.monotonic()
        for _ in range(PASSES):
            next_at += TICK_S
            time.sleep(max(0.0, next_at - time.monotonic()))
            Attempt.objects.filter(ended_at__isnull=True).update(last_heartbeat_at=timezone.now())
            with CaptureQueriesContext(connection) as queries:
                cpu, wall = time.process_time(), time.perf_counter()
                if profiler:
                    profiler.enable()
                summaries.append(reconcile())
                if profiler:
                    profiler.disable()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            walls.append(wall)
            cpus.append(cpu)
            statements.append(len(queries))
        assert all(s["supervised"] == n for s in summaries), summaries
        if profiler:
            profiler.dump_stats(profile)
    finally:
        runner.kill()
        runner.wait()
    end_all()
    return {"n": n, "walls": walls, "cpus": cpus, "statements": statements}


def end_all() -> None:
    """Every live job ends (its attempt first), so the next level starts with none."""
    from django.db import transaction

    from apps.jobs import services
    from apps.jobs.execution.attempts import end_attempt
    from apps.jobs.models import Attempt, Job
    from apps.jobs.states import JobState

    for attempt in Attempt.objects.filter(ended_at__isnull=True):
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=attempt.job_id)
            end_attempt(attempt, reason="bench")
            services.job_transition(job_id=attempt.job_id, to=JobState.TERMINATING)
            services.job_transition(job_id=attempt.job_id, to=JobState.TERMINATED)


def main() -> int:
    import redis
    from live_stack import setup_django

    redis.Redis.from_url(REDIS_URL).flushdb()
    setup_django(BENCH_DB, REDIS_URL)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        org = setup(Path(tmp))
        for n in LEVELS:
            result = level(org, n, Path(tmp), PROFILE if n == LEVELS[-1] else "")
            results.append(result)
            wall, cpu = statistics.median(result["walls"]), statistics.median(result["cpus"])
            print(
                f"{n:>6} live attempts: pass p50 {1000 * wall:7.1f} ms"
                f" (max {1000 * max(result['walls']):7.1f}), CPU p50 {1000 * cpu:7.1f} ms,"
                f" {statistics.median(result['statements']):.0f} statements",
                flush=True,
            )
    first, last = results[0], results[-1]
    ratio = statistics.median(last["walls"]) / statistics.median(first["walls"])
    print(
        f"pass p50 at {last['n']:,} ÷ at {first['n']:,}: {ratio:.1f} (target ≤ 12 at 1,000 ÷ 100)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
