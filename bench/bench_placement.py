"""Placement as an offer's history grows: finding offers with room, and placing a job.

Every dispatch and every quote asks which offers have room (`offers_with_free_capacity`),
and placing a job recounts its offer's use under the offer's lock. Both must grow with the
offer's live attempts, never with the attempts it ran before: a platform a year old has
hundreds of thousands of ended attempts on its busiest offer.

On a database of its own (`trainyard_bench_placement`, recreated each run): one offer with
`BENCH_PLACEMENT_LIVE` (default 200) live attempts. Measured with no history, then again
after `BENCH_PLACEMENT_HISTORY` (default 100,000) ended attempts are added to the same offer:
- `offers_with_free_capacity` for one job, median of 200 calls;
- a quote (`placement.quote`, what `GET /api/v1/compute/quotes` answers), median of 200;
- `allocate` of a waiting job (one transaction: lock, recount, attempt, events), per job
  over 50 jobs.
Printed: each at both points, and the ratio with history ÷ without (1.0: flat).

    .venv/bin/python bench/bench_placement.py
"""

from __future__ import annotations

import os
import time
import uuid

from common import funded_org, median_ms
from live_stack import setup_django

LIVE = int(os.environ.get("BENCH_PLACEMENT_LIVE", 200))
HISTORY = int(os.environ.get("BENCH_PLACEMENT_HISTORY", 100_000))
TIMES = 200  # calls timed per measure
REDIS_URL = os.environ.get("BENCH_PLACEMENT_REDIS_URL", "redis://127.0.0.1:6379/13")
BODY = {
    "name": "placement",
    "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
    "container": {"image": "local", "command": ["true"]},
}


def setup(total: int):
    from django.conf import settings

    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    settings.MAX_WAITING_JOBS_PER_ORG = total
    org = funded_org("placement", credits_micros=10**13)
    cpu = Accelerator.objects.get(name="cpu")
    Offer.objects.update(enabled=False)
    provider = Provider.objects.create(
        name="placement", kind=Provider.Kind.LOCAL, config={"runtime": "host", "multi_tenant": True}
    )
    Offer.objects.create(
        provider=provider,
        accelerator=cpu,
        gpu_counts=[1],
        capacity=total,
        price_per_gpu_hour_micros=10_000,
        min_price_per_gpu_hour_micros=10_000,
        max_price_per_gpu_hour_micros=10_000,
    )
    return org


def submit(org, n: int) -> list[int]:
    from apps.jobs import services

    created = (
        services.job_create(organization=org, payload=dict(BODY), idempotency_key=uuid.uuid4().hex)
        for _ in range(n)
    )
    return [result.job.pk for result in created]


def add_history(n: int) -> None:
    """`n` ended attempts on the offer, numbered after one job's live attempt."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_attempt (number, accelerator, gpu_count, gpu_memory_gb,
                price_micros_hr, handle, token_nonce, allocated_at, ended_at, end_reason,
                billed_minutes, offer_id, provider_id, job_id, reclaim_reason, queue_reason,
                gpu_devices)
            SELECT 1000 + g, a.accelerator, a.gpu_count, a.gpu_memory_gb, a.price_micros_hr,
                '{}', md5(g::text), a.allocated_at, now(), 'succeeded', 1, a.offer_id,
                a.provider_id, a.job_id, '', '', '[]'
            FROM generate_series(1, %s) AS g,
                (SELECT * FROM jobs_attempt ORDER BY id LIMIT 1) AS a
            """,
            [n],
        )
        cursor.execute("ANALYZE jobs_attempt")


def measure(org) -> dict[str, float]:
    from apps.jobs.execution import placement
    from apps.jobs.execution.dispatch import allocate

    waiting = submit(org, 50)
    started = time.perf_counter()
    for job_id in waiting:
        allocate(job_id)
    allocate_ms = 1000 * (time.perf_counter() - started) / len(waiting)
    return {
        "offers with room": median_ms(
            lambda: placement.offers_with_free_capacity(accelerator="cpu", gpu_count=1),
            repeats=TIMES,
            warm=False,
        ),
        "quote": median_ms(
            lambda: placement.quote(accelerator="cpu", gpu_count=1), repeats=TIMES, warm=False
        ),
        "allocate, per job": allocate_ms,
    }


def main() -> None:
    setup_django("trainyard_bench_placement", REDIS_URL)
    from apps.jobs.execution.dispatch import allocate

    org = setup(LIVE + 200)
    for job_id in submit(org, LIVE):
        allocate(job_id)
    bare = measure(org)
    add_history(HISTORY)
    grown = measure(org)
    print(f"one offer, {LIVE}+ live attempts; history: none, then {HISTORY:,} ended attempts")
    print(f"{'':20} {'no history':>12} {'with history':>14} {'ratio':>7}")
    for name, value in bare.items():
        print(f"{name:20} {value:10.2f} ms {grown[name]:12.2f} ms {grown[name] / value:7.2f}")


if __name__ == "__main__":
    main()
