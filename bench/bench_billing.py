"""What money costs on the hot paths (PostgreSQL, through the whole Django/DRF stack).

1. Usage report: `GET /api/v1/compute/usage` (first page of 50) and the streamed
   `usage.csv`, for an organization with 100,000 usage transfers (one per job, so the CSV has
   100,000 rows) against one with 100. The page reports (the ratio is expected to grow: the
   summary sums every transfer in the window); the CSV's peak Python memory must stay flat
   however many rows stream through: 100,000 rows against 10,000 (both fill the database
   fetch chunk of 2,000 rows; 100 rows never do) is about 1.
2. Submit: `POST /api/v1/compute/jobs` with the hold (band lookup, budget check, wallet lock,
   pending transfer) against the same request with the hold switched off in-process.
3. Reconcile's billing: `BILLED` live jobs each a minute further behind every round, billed
   together (`limits._bill_behind`, what the pass does for jobs only minutes behind) against
   as many of another organization's billed one by one (`limits.enforce_limits`, the way
   every job was billed before), taking turns for `BILLING_ROUNDS` rounds: wall time per
   job billed (medians), and the ratio.

Uses its own database (`trainyard_bench_billing`, recreated each run) and Redis database
(`BENCH_BILLING_REDIS_URL`, default db 13, flushed). Rows are made with generate_series.

    .venv/bin/python bench/bench_billing.py
    BENCH_BILLING_ONLY=reconcile .venv/bin/python bench/bench_billing.py   # part 3 alone
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

from common import api_key, funded_org, median_ms
from live_stack import setup_django

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REDIS_URL = os.environ.get("BENCH_BILLING_REDIS_URL", "redis://127.0.0.1:6379/13")
BENCH_DB = "trainyard_bench_billing"
BIG = int(os.environ.get("BENCH_USAGE_TRANSFERS", 100_000))
SMALL = 100
REPEATS = 20
SUBMITS = 60
BILLED = int(os.environ.get("BENCH_BILLED_JOBS", 100))
BILLING_ROUNDS = 5


def setup() -> None:
    """Its own database with Django set up on it, and its own Redis database emptied."""
    os.environ["ALLOWED_HOSTS"] = "testserver"
    os.environ["MAX_WAITING_JOBS_PER_ORG"] = str(10 * SUBMITS)
    setup_django(BENCH_DB, REDIS_URL)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def make_org(slug: str):
    """An organization with credits, an API key and one job placed on the local offer."""
    from apps.jobs.execution import dispatch
    from tests.jobs.helpers import make_job

    org = funded_org(slug)
    job = make_job(org)
    return org, api_key(org), job, dispatch.allocate(job.pk)


def fill_usage(org, job, attempt, count: int) -> None:
    """`count` jobs of `org` billed one usage transfer each (the first is `job`'s): copies of
    the job, its attempt and its meter, and a transfer per attempt; the wallet's cached sums
    kept true."""
    from django.db import connection

    from apps.billing import ledger

    job_columns = [
        f.column
        for f in job._meta.concrete_fields
        if f.column not in {"id", "public_id", "created_at", "idempotency_key"}
    ]
    attempt_columns = [
        f.column
        for f in attempt._meta.concrete_fields
        if f.column not in {"id", "job_id", "token_nonce"}
    ]
    jobs, attempts = ", ".join(job_columns), ", ".join(attempt_columns)
    copied = ", ".join(f"a.{column}" for column in attempt_columns)
    accounts = ledger.accounts_for(org.pk)
    wallet, usage = accounts["wallet"].pk, accounts["usage"].pk
    amount = 10_000  # one minute at $0.60/h
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_job (public_id, created_at, idempotency_key, {jobs}) "
            f"SELECT 'job_' || substr(md5(g::text || '-' || id::text), 1, 16), now(), NULL, "
            f"{jobs} FROM jobs_job, generate_series(1, %s) AS g WHERE id = %s",
            [count - 1, job.pk],
        )
        cursor.execute(
            f"INSERT INTO jobs_attempt (job_id, token_nonce, {attempts}) "
            f"SELECT j.id, md5(random()::text || j.id::text), {copied} "
            "FROM jobs_attempt a, jobs_job j WHERE a.id = %s AND j.organization_id = %s "
            "AND j.id <> %s",
            [attempt.pk, org.pk, job.pk],
        )
        cursor.execute(  # the copies hold no hardware (else the offer would look full)
            "UPDATE jobs_attempt SET ended_at = now() WHERE id <> %s AND job_id IN "
            "(SELECT id FROM jobs_job WHERE organization_id = %s)",
            [attempt.pk, org.pk],
        )
        cursor.execute(
            "INSERT INTO billing_meter (attempt_id, job_id, organization_id, project_id, "
            "resource_type, resource_id, resource_name, price_micros_hr, billed_minutes, "
            "posted_micros, started_at, ended_at) "
            "SELECT a.id, j.id, j.organization_id, j.project_id, 'job', j.public_id, j.name, "
            "a.price_micros_hr, 1, %s, now(), now() FROM jobs_attempt a JOIN jobs_job j "
            "ON a.job_id = j.id WHERE j.organization_id = %s AND a.id <> %s",
            [amount, org.pk, attempt.pk],
        )
        cursor.execute(
            "INSERT INTO billing_transfer (debit_account_id, credit_account_id, amount_micros, "
            "code, state, idempotency_key, organization_id, project_id, job_id, attempt_id, "
            "minutes, minutes_to, memo, created_at) "
            "SELECT %s, %s, %s, 'usage', 'posted', 'bench:' || a.id, j.organization_id, "
            "j.project_id, j.id, a.id, 1, 1, '', now() - interval '1 hour' "
            "FROM jobs_attempt a JOIN jobs_job j ON a.job_id = j.id "
            "WHERE j.organization_id = %s",
            [wallet, usage, amount, org.pk],
        )
        cursor.execute(
            "UPDATE billing_account SET posted_debits = posted_debits + %s WHERE id = %s",
            [amount * count, wallet],
        )
        cursor.execute(
            "UPDATE billing_account SET posted_credits = posted_credits + %s WHERE id = %s",
            [amount * count, usage],
        )
        for table in ("jobs_job", "jobs_attempt", "billing_meter", "billing_transfer"):
            cursor.execute(f"ANALYZE {table}")


def client_for(key: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def usage_page(client) -> dict:
    response = client.get("/api/v1/compute/usage", {"limit": 50})
    assert response.status_code == 200, response.content
    return response.json()


def csv_download(client) -> tuple[int, float]:
    """Stream the CSV; return its data rows and the milliseconds it took."""
    start = time.perf_counter()
    response = client.get("/api/v1/compute/usage.csv")
    assert response.status_code == 200
    rows = sum(chunk.count(b"\n") for chunk in response.streaming_content) - 1
    return rows, (time.perf_counter() - start) * 1000


def csv_peak_bytes(client) -> int:
    """The peak Python memory while the CSV streams (tracemalloc slows the run, so this is
    a separate download from the timed one)."""
    tracemalloc.start()
    csv_download(client)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def bench_usage() -> tuple[float, float, float]:
    from apps.billing import ledger
    from apps.catalog.models import Offer
    from apps.providers.models import Provider

    # Room for every organization's first job on the local host.
    Provider.objects.filter(name="local").update(config={"multi_tenant": True})
    Offer.objects.filter(provider__name="local").update(capacity=1000)

    small_org, small_key, small_job, small_attempt = make_org("usage-small")
    fill_usage(small_org, small_job, small_attempt, SMALL)
    big_org, big_key, big_job, big_attempt = make_org("usage-big")
    fill_usage(big_org, big_job, big_attempt, BIG)
    tenth_org, tenth_key, tenth_job, tenth_attempt = make_org("usage-tenth")
    fill_usage(tenth_org, tenth_job, tenth_attempt, BIG // 10)
    tenth = client_for(tenth_key)
    assert ledger.audit() == [], "the bench's rows broke the ledger's cached sums"
    small, big = client_for(small_key), client_for(big_key)
    assert usage_page(big)["total"] == BIG and usage_page(small)["total"] == SMALL

    page_small = median_ms(lambda: usage_page(small), repeats=REPEATS)
    page_big = median_ms(lambda: usage_page(big), repeats=5)
    small_rows, csv_small = csv_download(small)
    big_rows, csv_big = csv_download(big)
    small_peak, tenth_peak, big_peak = (
        csv_peak_bytes(small),
        csv_peak_bytes(tenth),
        csv_peak_bytes(big),
    )
    assert (small_rows, big_rows) == (SMALL, BIG), (small_rows, big_rows)
    print(
        f"usage page (50 rows): {SMALL} transfers {page_small:.1f} ms, {BIG:,} transfers "
        f"{page_big:.1f} ms, ratio {page_big / page_small:.1f} (reported)"
    )
    print(
        f"usage.csv: {SMALL} rows {csv_small:.0f} ms / peak {small_peak / 1024:.0f} KiB, "
        f"{BIG:,} rows {csv_big:.0f} ms / peak {big_peak / 1024:.0f} KiB; "
        f"time per row {csv_big / BIG * 1000:.1f} µs; peak memory {BIG:,} rows ÷ "
        f"{BIG // 10:,} rows {big_peak / tenth_peak:.2f} (target about 1: flat once a "
        f"fetch chunk is full; ÷ {SMALL} rows {big_peak / small_peak:.2f})"
    )
    return page_big / page_small, csv_big / csv_small, big_peak / tenth_peak


def bench_submit() -> float:
    from apps.billing import budgets, holds
    from apps.jobs import services
    from tests.jobs.helpers import job_body

    _, key, _, _ = make_org("submit")
    client = client_for(key)

    def submit():
        response = client.post(
            "/api/v1/compute/jobs",
            job_body(),
            format="json",
            HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
        )
        assert response.status_code == 201, response.content

    with_hold = median_ms(submit, repeats=SUBMITS)
    place_hold, check_create, hold_for = holds.place_hold, budgets.check_create, services.hold_for
    holds.place_hold = lambda **kwargs: None
    budgets.check_create = lambda **kwargs: None
    services.hold_for = lambda spec: 0
    try:
        without = median_ms(submit, repeats=SUBMITS)
    finally:
        holds.place_hold, budgets.check_create, services.hold_for = (
            place_hold,
            check_create,
            hold_for,
        )
    ratio = with_hold / without
    print(
        f"submit: with the hold {with_hold:.1f} ms, without {without:.1f} ms, "
        f"ratio {ratio:.2f} (reported)"
    )
    return ratio


def live_jobs(slug: str, count: int) -> list[int]:
    """`count` running jobs of a new organization on a roomy multi-tenant offer."""
    from apps.catalog.models import Accelerator, Offer
    from apps.jobs import services
    from apps.jobs.execution import dispatch
    from apps.jobs.states import JobState
    from apps.providers.models import Provider
    from tests.jobs.helpers import make_job

    provider, _ = Provider.objects.get_or_create(
        name="bench-roomy", defaults={"kind": "ssh", "config": {"multi_tenant": True}}
    )
    accelerator = Accelerator.objects.get(name="nvidia-a100-80gb")
    if not Offer.objects.filter(provider=provider).exists():
        Offer.objects.create(
            provider=provider,
            accelerator=accelerator,
            gpu_counts=[1],
            capacity=10 * count,
            price_per_gpu_hour_micros=600_000,
            min_price_per_gpu_hour_micros=600_000,
            max_price_per_gpu_hour_micros=600_000,
        )
    org = funded_org(slug)
    compute = {"accelerator": accelerator.name, "gpu_count": 1, "ephemeral_disk_gb": 10}
    ids = []
    for _ in range(count):
        job = make_job(org, compute=compute)
        assert dispatch.allocate(job.pk) is not None
        for step in (JobState.PROVISIONING, JobState.RUNNING):
            services.job_transition(job_id=job.pk, to=step)
        ids.append(job.pk)
    return ids


def bench_reconcile_billing() -> float:
    from datetime import timedelta

    from django.db.models import F
    from django.utils import timezone

    from apps.billing.models import Transfer
    from apps.jobs.execution import limits
    from apps.jobs.models import Attempt

    together, alone = live_jobs("bill-together", BILLED), live_jobs("bill-alone", BILLED)
    per_job = {"together": [], "alone": []}
    for _ in range(BILLING_ROUNDS):
        Attempt.objects.filter(job_id__in=together + alone).update(
            billing_started_at=F("billing_started_at") - timedelta(minutes=1)
        )
        now = timezone.now()
        started = time.perf_counter()
        assert limits._bill_behind(together, now) == BILLED
        per_job["together"].append((time.perf_counter() - started) / BILLED)
        started = time.perf_counter()
        for job_id in alone:
            assert limits.enforce_limits(job_id)
        per_job["alone"].append((time.perf_counter() - started) / BILLED)
    postings = {
        slug: Transfer.objects.filter(organization__slug=slug, code="usage").count()
        for slug in ("bill-together", "bill-alone")
    }
    assert postings["bill-together"] == postings["bill-alone"] == BILLED * BILLING_ROUNDS
    together_ms = 1000 * statistics.median(per_job["together"])
    alone_ms = 1000 * statistics.median(per_job["alone"])
    ratio = together_ms / alone_ms
    print(
        f"reconcile billing, {BILLED} jobs a minute behind, {BILLING_ROUNDS} rounds: "
        f"together {together_ms:.2f} ms a job, one by one {alone_ms:.2f} ms a job, "
        f"ratio {ratio:.2f} (reported)"
    )
    return ratio


def main() -> int:
    setup()
    if os.environ.get("BENCH_BILLING_ONLY") != "reconcile":
        bench_usage()
        bench_submit()
    bench_reconcile_billing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
