"""Log ingestion: lines per second through the runner endpoint against raw COPY.

- Endpoint: a real uvicorn server (the production ASGI app) on this script's database; one
  keep-alive connection POSTs `BENCH_INGEST_LINES` lines (default 200,000) to
  `/api/v1/runner/jobs/<id>/logs` in batches of 1,000, the runner's default batch. The job
  has one secret (HF_TOKEN), so every line is masked as in production, and every 50th line
  is a Hugging Face Trainer metric dict, so metric points are parsed and stored.
- COPY: the same rows, in the same batches, each batch its own transaction, with psycopg 3's
  `cursor.copy()` into the same table (`jobs_logline`) for a second job.

Target: the endpoint stores at least a quarter of the lines per second COPY does (#45; the
first target, a third (#13), was set before raw COPY got twice as fast without the table's
foreign-key check).

The two take turns, a tenth of the lines at a time, so both see the same background load on
a shared machine and a table of the same size. Bodies and rows are built before the clock
starts: the runner encodes its batches on its own machine. Afterwards the endpoint's job
must hold exactly the lines sent (rows and counters), so the figure counts stored lines.
Last, one batch's work in the view is timed in this process, step by step, to show where the
time goes.

Uses its own database (`trainyard_bench_ingest`, recreated each run) and Redis database
(`BENCH_INGEST_REDIS_URL`, default db 13, flushed) for the channel layer's broadcasts.

    .venv/bin/python bench/bench_ingestion.py
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
BENCH_DB = "trainyard_bench_ingest"
DATABASE_URL = f"{ADMIN_URL.rsplit('/', 1)[0]}/{BENCH_DB}"
REDIS_URL = os.environ.get("BENCH_INGEST_REDIS_URL", "redis://127.0.0.1:6379/13")
LINES = int(os.environ.get("BENCH_INGEST_LINES", 200_000))
BATCH = 1000  # the runner's default `log_batch_max_lines`
ROUNDS = 10
TARGET = 0.25
SECRET = "hf_bEnChSeCrEtToKeN0123456789abcdef"
PROFILE_BATCHES = 30

SERVER_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.test_settings",
    # As in production (the test settings turn the pool off): a request takes a connection
    # from the web process's pool instead of opening one.
    "DATABASE_POOL": "1",
    "DATABASE_URL": DATABASE_URL,
    "REDIS_URL": REDIS_URL,
    "ALLOWED_HOSTS": "127.0.0.1",
}
COPY_SQL = "COPY jobs_logline (job_id, attempt, seq, source, stream, timestamp, message) FROM STDIN"

Line = tuple[int, datetime, str, str]  # seq, timestamp, stream, message


def recreate_database() -> None:
    import psycopg
    import redis

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    redis.Redis.from_url(REDIS_URL).flushdb()


def setup_django() -> None:
    os.environ.update(SERVER_ENV)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_attempt(org, secret, name: str):
    """A job of `org` whose first attempt is live, as dispatch leaves it (no runner needed:
    the log endpoint checks the token, not the state)."""
    from apps.jobs import services
    from apps.jobs.models import Attempt, Job

    payload = {
        "name": name,
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
        "container": {
            "image": "python:3.11-slim",
            "command": ["python", "train.py"],
            "secret_env": {"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
        },
    }
    job = services.job_create(organization=org, payload=payload, idempotency_key=None).job
    attempt = Attempt.objects.create(job=job, number=1, accelerator="cpu", gpu_count=1)
    Job.objects.filter(pk=job.pk).update(attempt_count=1)
    job.refresh_from_db()
    return job, attempt


def message(seq: int) -> tuple[str, str]:
    """(stream, message) of line `seq`: mostly progress lines, an HF Trainer metric dict every
    50th line, now and then a warning on stderr or a line carrying the secret."""
    if seq % 50 == 0:
        step = seq // 50
        return "stdout", (
            f"{{'loss': {2.5 - (step % 1000) / 1000:.4f}, 'grad_norm': {0.8 + (seq % 7) / 10:.3f},"
            f" 'learning_rate': {2e-4 * (1 - (step % 1000) / 1000):.3e},"
            f" 'epoch': {step / 400:.2f}}}"
        )
    if seq % 997 == 0:
        return "stderr", f"Logging in to the Hub with token {SECRET} (seq {seq})"
    if seq % 101 == 0:
        return "stderr", (
            "/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:61: UserWarning: "
            "None of the inputs have requires_grad=True. Gradients will be None"
        )
    done = seq % 4000
    return "stdout", (
        f"{done * 100 // 4000:3d}%|{'#' * (done * 10 // 4000):<10}| {done}/4000 "
        f"[{done // 180:02d}:{done % 60:02d}<21:30, {2.5 + (seq % 13) / 10:.2f}it/s] "
        f"rank0 tokens/s {41000 + seq % 997} mem 13.{seq % 10}GB"
    )


def make_batches(count: int) -> list[list[Line]]:
    base = datetime.now(UTC)
    lines = [
        (seq, base + timedelta(microseconds=seq * 700), *message(seq))
        for seq in range(1, count + 1)
    ]
    return [lines[i : i + BATCH] for i in range(0, len(lines), BATCH)]


def request_body(batch: list[Line]) -> bytes:
    lines = [
        {
            "seq": seq,
            "ts": ts.isoformat().replace("+00:00", "Z"),
            "source": "user",
            "stream": stream,
            "message": text,
        }
        for seq, ts, stream, text in batch
    ]
    return json.dumps({"lines": lines}).encode()


def post_batches(conn: http.client.HTTPConnection, path: str, token: str, bodies) -> float:
    """Seconds to POST `bodies` one after another on `conn`; every line must be new."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.perf_counter()
    for body in bodies:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        assert response.status == 200, answer
        assert json.loads(answer)["duplicates"] == 0, answer
    return time.perf_counter() - start


def copy_batches(conn, batches: list[list[tuple]]) -> float:
    """Seconds to COPY `batches`, one transaction each."""
    start = time.perf_counter()
    for batch in batches:
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(COPY_SQL) as copy:
            for row in batch:
                copy.write_row(row)
    return time.perf_counter() - start


def stored_lines(job) -> tuple[int, int]:
    """(rows in jobs_logline, the job's own counters) of `job`."""
    from apps.jobs.models import Job, LogLine

    counted = Job.objects.values_list("user_log_lines", "system_log_lines").get(pk=job.pk)
    return LogLine.objects.filter(job=job).count(), sum(counted)


def breakdown(attempt, bodies: list[bytes]) -> dict[str, float]:
    """Median ms per batch of each step of the log view, in order, in this process (no
    HTTP). Each request of the server takes a connection from its pool and gives it back:
    so does each batch here (`connection.close()` returns it). `ingest` masks again, then inserts,
    counts, stores metrics, commits and pushes to the page's channel group; every other
    batch runs without a channel layer, which skips the push, and the difference is the
    push's share."""
    from django.db import connection
    from django.test import override_settings

    from apps.jobs.execution.tokens import nonce_from, token_for
    from apps.jobs.runner_api.auth import attempts_by_nonce
    from apps.jobs.telemetry import ingestion

    token = token_for(attempt.token_nonce)
    steps: dict[str, list[float]] = {
        "connection from the pool + find attempt": [],
        "json.loads": [],
        "parse_batch": [],
        "mask": [],
        "ingest": [],
    }
    without_push: list[float] = []
    for index, body in enumerate(bodies):
        connection.close()
        t0 = time.perf_counter()
        nonce = nonce_from(token)
        found = attempts_by_nonce([nonce])[nonce]  # as the runner endpoint finds it
        t1 = time.perf_counter()
        payload = json.loads(body)
        t2 = time.perf_counter()
        lines = ingestion.parse_batch(payload)
        t3 = time.perf_counter()
        masker = ingestion.secret_masker(found, found.job)
        for line in lines:
            masker.mask(line.message)
        t4 = time.perf_counter()
        if index % 2:
            with override_settings(CHANNEL_LAYERS={}):
                start = time.perf_counter()
                result = ingestion.ingest(attempt=found, job=found.job, lines=lines)
                without_push.append((time.perf_counter() - start) * 1000)
        else:
            result = ingestion.ingest(attempt=found, job=found.job, lines=lines)
            steps["ingest"].append((time.perf_counter() - t4) * 1000)
        assert result.accepted == len(lines)
        for name, took in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=False):
            steps[name].append(took * 1000)
    medians = {name: statistics.median(samples) for name, samples in steps.items()}
    medians["of which live push"] = medians["ingest"] - statistics.median(without_push)
    return medians


def bench(port: int, endpoint_attempt, copy_job, batches: list[list[Line]]) -> tuple[float, float]:
    """(endpoint lines/s, COPY lines/s), taking turns a round at a time."""
    import psycopg

    from apps.jobs.execution.tokens import token_for

    bodies = [request_body(batch) for batch in batches]
    rows = [
        [(copy_job.pk, 1, seq, "user", stream, ts, text) for seq, ts, stream, text in batch]
        for batch in batches
    ]
    path = f"/api/v1/runner/jobs/{endpoint_attempt.job.public_id}/logs"
    token = token_for(endpoint_attempt.token_nonce)
    per_round = -(-len(batches) // ROUNDS)
    endpoint_s = copy_s = 0.0
    http_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        with psycopg.connect(DATABASE_URL) as db:
            for first in range(0, len(batches), per_round):
                turn = slice(first, first + per_round)
                endpoint_s += post_batches(http_conn, path, token, bodies[turn])
                copy_s += copy_batches(db, rows[turn])
    finally:
        http_conn.close()
    return LINES / endpoint_s, LINES / copy_s


def main() -> int:
    from live_stack import web_answers

    from tests.live import free_port, process_group, wait_until

    recreate_database()
    setup_django()
    from common import funded_org

    from apps.secrets.services import secret_create

    org = funded_org("bench-ingest")
    secret = secret_create(organization=org, name="hub", data={"HF_TOKEN": SECRET})
    endpoint_job, endpoint_attempt = make_attempt(org, secret, "through the endpoint")
    copy_job, _ = make_attempt(org, secret, "raw copy")
    _, profile_attempt = make_attempt(org, secret, "in-process breakdown")
    batches = make_batches(LINES)

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as workdir:
        log = Path(workdir) / "web.log"
        args = [
            str(Path(sys.executable).parent / "uvicorn"),
            "config.asgi:application",
            *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
            # The connection idles while COPY has its turn; keep it open (default 5 s).
            *("--timeout-keep-alive", "120"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        with process_group(args, env={**env, **SERVER_ENV}, log=log):
            wait_until(lambda: web_answers(port), timeout=30, what=f"uvicorn on :{port}")
            try:
                endpoint_rate, copy_rate = bench(port, endpoint_attempt, copy_job, batches)
            except Exception:
                print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
                raise

    rows_stored, counted = stored_lines(endpoint_job)
    assert rows_stored == LINES, f"{rows_stored:,} lines stored, {LINES:,} sent"
    assert counted == LINES, f"the job counts {counted:,} lines, {LINES:,} sent"
    assert stored_lines(copy_job)[0] == LINES

    ratio = endpoint_rate / copy_rate
    print(
        f"ingestion ({LINES:,} lines, batches of {BATCH:,}): endpoint {endpoint_rate:,.0f} "
        f"lines/s, raw COPY {copy_rate:,.0f} lines/s, ratio {ratio:.2f} "
        f"(target >= {TARGET:.2f}); stored and counted: {rows_stored:,}"
    )
    steps = breakdown(profile_attempt, [request_body(b) for b in batches[:PROFILE_BATCHES]])
    per_batch_ms = BATCH / endpoint_rate * 1000
    # `ingest` masks again and includes the push, so those two are counted once.
    in_view = sum(steps.values()) - steps["mask"] - steps["of which live push"]
    parts = ", ".join(f"{name} {took:.1f}" for name, took in steps.items())
    print(
        f"a batch: {per_batch_ms:.1f} ms through the endpoint; in process (medians of "
        f"{PROFILE_BATCHES // 2}, ms): {parts}; left for HTTP, ASGI and the client "
        f"{per_batch_ms - in_view:.1f}"
    )
    print("within target" if ratio >= TARGET else "OUTSIDE TARGET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
