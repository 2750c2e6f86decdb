"""How API pages grow with rows (PostgreSQL, through the whole Django/DRF stack).

1. Logs: one job with 1,000,000 log lines. The last page (keyset cursor near the end) against
   the first page. Target: ratio <= 1.5.
2. Job list: the first page of an organization with 100,000 jobs against one with 100 jobs.
   Target: ratio <= 1.5.

Uses its own database (`trainyard_bench`, recreated each run). Rows are made with
generate_series in SQL, so setting up takes about a minute; timings are medians of repeats.

    make bench            # or: .venv/bin/python bench/bench_api_pages.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
BENCH_DB = "trainyard_bench"
LOG_LINES = int(os.environ.get("BENCH_LOG_LINES", 1_000_000))
BIG_ORG_JOBS = int(os.environ.get("BENCH_JOBS", 100_000))
SMALL_ORG_JOBS = 100
REPEATS = 30

from common import api_key, funded_org, median_ms  # noqa: E402


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')


def setup_django() -> None:
    base = ADMIN_URL.rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/{BENCH_DB}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    os.environ["ALLOWED_HOSTS"] = "testserver"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_org(slug: str):
    from tests.jobs.helpers import make_job

    org = funded_org(slug)
    return org, api_key(org), make_job(org)


def clone_jobs(job, count: int) -> None:
    """Insert `count` copies of `job` (fresh ids, spread creation times) and set the counters
    the services would have kept."""
    from django.db import connection

    columns = [
        f.column
        for f in job._meta.concrete_fields
        if f.column not in {"id", "public_id", "created_at", "idempotency_key"}
    ]
    cols = ", ".join(columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_job (public_id, created_at, idempotency_key, {cols}) "
            f"SELECT 'job_' || substr(md5(g::text || '-' || id::text), 1, 16), "
            "now() - (g || ' seconds')::interval, "
            f"NULL, {cols} FROM jobs_job, generate_series(1, %s) AS g WHERE id = %s",
            [count, job.id],
        )
        cursor.execute(
            "UPDATE jobs_jobcounter SET count = count + %s WHERE project_id = %s AND state = %s",
            [count, job.project_id, job.state],
        )
        cursor.execute("ANALYZE jobs_job")


def add_log_lines(job, count: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_logline (job_id, attempt, source, stream, timestamp, message) "
            "SELECT %s, 1, CASE WHEN g %% 10 = 0 THEN 'system' ELSE 'user' END, 'stdout', "
            "now() + (g || ' milliseconds')::interval, 'step ' || g || ' loss 0.' || g "
            "FROM generate_series(1, %s) AS g",
            [job.id, count],
        )
        cursor.execute(
            "UPDATE jobs_job SET user_log_lines = %s, system_log_lines = %s WHERE id = %s",
            [count - count // 10, count // 10, job.id],
        )
        cursor.execute("ANALYZE jobs_logline")


def client_for(key: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def get_ok(client, path: str, params: dict) -> dict:
    response = client.get(path, params)
    assert response.status_code == 200, response.content
    return response.json()


def bench_logs() -> float:
    from apps.core.pagination import encode_cursor
    from apps.jobs.models import LogLine

    _, key, job = make_org("bench-logs")
    add_log_lines(job, LOG_LINES)
    client = client_for(key)
    path = f"/api/v1/compute/jobs/{job.public_id}/logs"
    last_ids = list(
        LogLine.objects.filter(job=job).order_by("-id").values_list("id", flat=True)[:51]
    )
    last_cursor = encode_cursor([last_ids[-1]])
    last_page = get_ok(client, path, {"limit": 50, "cursor": last_cursor})
    assert last_page["next_cursor"] is None and len(last_page["data"]) == 50

    first = median_ms(lambda: get_ok(client, path, {"limit": 50}), repeats=REPEATS)
    last = median_ms(
        lambda: get_ok(client, path, {"limit": 50, "cursor": last_cursor}), repeats=REPEATS
    )
    user_last = median_ms(
        lambda: get_ok(client, path, {"limit": 50, "source": "user", "order": "desc"}),
        repeats=REPEATS,
    )
    ratio = last / first
    print(
        f"logs ({LOG_LINES:,} lines): first page {first:.2f} ms, last page {last:.2f} ms, "
        f"ratio {ratio:.2f} (target <= 1.5); newest user lines {user_last:.2f} ms"
    )
    return ratio


def bench_job_list() -> float:
    _, small_key, small_job = make_org("bench-small")
    clone_jobs(small_job, SMALL_ORG_JOBS - 1)
    _, big_key, big_job = make_org("bench-big")
    clone_jobs(big_job, BIG_ORG_JOBS - 1)
    small_client, big_client = client_for(small_key), client_for(big_key)
    assert get_ok(big_client, "/api/v1/compute/jobs", {"limit": 50})["total"] == BIG_ORG_JOBS

    small = median_ms(
        lambda: get_ok(small_client, "/api/v1/compute/jobs", {"limit": 50}), repeats=REPEATS
    )
    big = median_ms(
        lambda: get_ok(big_client, "/api/v1/compute/jobs", {"limit": 50}), repeats=REPEATS
    )
    filtered = median_ms(
        lambda: get_ok(big_client, "/api/v1/compute/jobs", {"limit": 50, "state": "requested"}),
        repeats=REPEATS,
    )
    ratio = big / small
    print(
        f"job list first page: {SMALL_ORG_JOBS} jobs {small:.2f} ms, "
        f"{BIG_ORG_JOBS:,} jobs {big:.2f} ms, ratio {ratio:.2f} (target <= 1.5); "
        f"filtered by state {filtered:.2f} ms"
    )
    return ratio


def main() -> int:
    recreate_database()
    setup_django()
    log_ratio = bench_logs()
    list_ratio = bench_job_list()
    ok = log_ratio <= 1.5 and list_ratio <= 1.5
    print("within targets" if ok else "OUTSIDE TARGETS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
