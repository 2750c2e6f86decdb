"""How the dashboard's pages grow with an organization's jobs (PostgreSQL, the whole Django
stack, a signed-in member, HTML rendered).

An organization with 100,000 jobs against one with 100, both with the same mix: 20 running,
10 waiting for capacity, 3 failed in the last day, the rest finished over the past 30 days
(one in ten failed). Pages: the overview (`/o/<org>/`), the all-jobs list's first page, its
second page (by cursor), and the list filtered by project and state, by kind, by creator,
and by a name search that matches the newest jobs and one that matches nothing. A search
that matches few jobs cannot walk the newest jobs until it has a page: it reads the
trigram index on names (migration jobs/0012; without `pg_trgm` it reads every row of the
organization, 6 → 49 ms here).

Target: each page's ratio (100k ÷ 100) <= 1.5, except the search that matches nothing,
which is reported as it is (about 1.7: the trigram index grows with the names).

Uses its own database (`trainyard_bench_dashboard`, recreated each run); rows are made with
generate_series in SQL. Timings are medians of repeats.

    make bench            # or: .venv/bin/python bench/bench_dashboard.py
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from common import funded_org, median_ms

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
BENCH_DB = "trainyard_bench_dashboard"
REDIS_URL = os.environ.get("BENCH_DASHBOARD_REDIS_URL", "redis://127.0.0.1:6379/13")
BIG = int(os.environ.get("BENCH_JOBS", 100_000))
SMALL = 100
REPEATS = 20
TARGET = 1.5


def make_org(slug: str, jobs: int):
    """An organization with a member, a project and `jobs` jobs in the mix above."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from apps.accounts.models import Membership
    from apps.projects.models import Project
    from tests.jobs.helpers import make_job

    org = funded_org(slug)
    user = get_user_model().objects.create_user(username=f"{slug}-member", password="x")
    Membership.objects.create(organization=org, user=user, role="member")
    Project.objects.create(organization=org, name="Sweeps", slug="sweeps")
    template = make_job(org, name="template")
    columns = [
        f.column
        for f in template._meta.concrete_fields
        if f.column
        not in {
            "id",
            "public_id",
            "created_at",
            "idempotency_key",
            "state",
            "terminal_at",
            "name",
            "reason",
            "created_by_id",
            "kind",
            "started_at",
        }
    ]
    cols = ", ".join(columns)
    # g = 1 is the newest job. 1-20 running, 21-30 waiting, 31-33 failed today, the rest
    # finished up to 30 days ago.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_job (public_id, created_at, idempotency_key, state, terminal_at, "
            f"name, reason, created_by_id, kind, started_at, {cols}) "
            "SELECT 'job_' || substr(md5(%s || '-' || g::text), 1, 16), "
            "  now() - (g * %s || ' seconds')::interval, NULL, "
            "  CASE WHEN g <= 20 THEN 'running' WHEN g <= 30 THEN 'requested' "
            "       WHEN g <= 33 OR g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, "
            "  CASE WHEN g <= 30 THEN NULL "
            "       ELSE now() - (g * %s || ' seconds')::interval + interval '5 minutes' END, "
            "  CASE WHEN g %% 2 = 0 THEN 'sweep-' ELSE 'eval-' END || g, "
            "  CASE WHEN g > 30 AND (g <= 33 OR g %% 10 = 0) THEN 'exit_code_1' END, "
            "  CASE WHEN g %% 3 = 0 THEN %s END, "
            "  CASE WHEN g %% 5 = 0 THEN 'finetune' ELSE 'container' END, "
            "  CASE WHEN g <= 20 OR g > 30 THEN now() - (g * %s || ' seconds')::interval END, "
            f"  {cols} FROM jobs_job, generate_series(1, %s) AS g WHERE id = %s",
            [
                slug,
                2_592_000 // jobs,
                2_592_000 // jobs,
                user.pk,
                2_592_000 // jobs,
                jobs - 1,
                template.pk,
            ],
        )
        cursor.execute(  # the template itself: the oldest job, long finished
            "UPDATE jobs_job SET state = 'succeeded', created_at = now() - interval '31 days', "
            "terminal_at = now() - interval '31 days' WHERE id = %s",
            [template.pk],
        )
        cursor.execute("DELETE FROM jobs_jobcounter WHERE organization_id = %s", [org.pk])
        cursor.execute(
            "INSERT INTO jobs_jobcounter (organization_id, project_id, state, count) "
            "SELECT organization_id, project_id, state, count(*) FROM jobs_job "
            "WHERE organization_id = %s GROUP BY 1, 2, 3",
            [org.pk],
        )
        cursor.execute(
            "INSERT INTO jobs_jobevent (job_id, attempt, type, message, data, created_at) "
            "SELECT id, NULL, 'waiting_for_capacity', 'Waiting.', '{}', now() FROM jobs_job "
            "WHERE organization_id = %s AND state = 'requested'",
            [org.pk],
        )
        cursor.execute("ANALYZE")
    return org, user


def client_for(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def get_ok(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def main() -> int:
    from live_stack import setup_django

    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    setup_django(BENCH_DB, REDIS_URL)
    _, small_user = make_org("small", SMALL)
    _, big_user = make_org("big", BIG)
    clients = {"small": client_for(small_user), "big": client_for(big_user)}
    project = "default"

    def second_page(slug: str) -> str:
        first = get_ok(clients[slug], f"/o/{slug}/jobs/")
        older = re.search(r'class="older" href="([^"]+)"', first).group(1)
        return f"/o/{slug}/jobs/{older.replace('&amp;', '&')}"

    pages = {
        "overview": "/o/{slug}/",
        "all jobs, first page": "/o/{slug}/jobs/",
        "all jobs, second page": None,
        "project + state filter": f"/o/{{slug}}/jobs/?project={project}&state=succeeded",
        "kind filter": "/o/{slug}/jobs/?kind=finetune",
        "creator filter": "/o/{slug}/jobs/?creator={slug}-member",
        "name search, common": "/o/{slug}/jobs/?q=sweep",
        "name search, no match": "/o/{slug}/jobs/?q=nothing-like-this",
    }
    overview = get_ok(clients["big"], "/o/big/")
    assert 'data-overview="running-count">20<' in overview, "the overview lost its counts"
    assert "No capacity" in overview and "exit_code_1" in overview
    print(f"dashboard pages: {SMALL} jobs vs {BIG:,} jobs (medians of {REPEATS})")
    worst = 0.0
    for label, pattern in pages.items():
        paths = {
            slug: second_page(slug) if pattern is None else pattern.format(slug=slug)
            for slug in ("small", "big")
        }
        small = median_ms(lambda p=paths["small"]: get_ok(clients["small"], p), repeats=REPEATS)
        big = median_ms(lambda p=paths["big"]: get_ok(clients["big"], p), repeats=REPEATS)
        ratio = big / small
        flat = label != "name search, no match"
        if flat:
            worst = max(worst, ratio)
        note = f"(target <= {TARGET})" if flat else "(trigram index: reported only)"
        print(f"  {label:26} {small:7.2f} ms  {big:7.2f} ms  ratio {ratio:5.2f} {note}")
    print("within targets" if worst <= TARGET else "OUTSIDE TARGETS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
