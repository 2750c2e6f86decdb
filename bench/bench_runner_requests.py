"""The web process's CPU per runner request: what sets how many live attempts one web
process serves (#19), measured without the rest of the stack's noise.

Two uvicorn servers of the production ASGI app (`config.asgi`, pooled connections) on this
script's database, taking turns a round at a time: one with the middleware chain as
deployed (async-capable static files and JSON errors, `SyncChainMiddleware` innermost, so a
request crosses from the event loop to its thread once), and a baseline with the chain
Django's defaults give (`bench/baseline_middleware_settings.py`: WhiteNoise's own sync-only
middleware; the request crosses between loop and thread around nearly every middleware).
Against each, 32 live attempts are played the way runners printing a line a second talk to
the control plane at load: a fresh connection per request, four one-line log batches for
every heartbeat, `BENCH_RUNNER_REQUESTS_CONCURRENCY` (default 8) requests in flight,
`BENCH_RUNNER_REQUESTS` (default 3,000) requests a round, three rounds each. The figure is
the server process's CPU time (user + system, from /proc) over its round, divided by the
round's requests; medians. For reference, the same requests through Django's test client in
this process (views, middleware and queries without HTTP, uvicorn and ASGI), by this
process's CPU time. Then the same calls relayed (`runner.relay`): `BENCH_RELAY_BUNDLE`
(default 100) attempts of their own, each with one call in every bundle to `POST relay`
(the same mix), two bundles in flight, on the server as deployed: its CPU per runner call
against the calls sent alone. Every answer (and every entry's) must be a 200 and every line
stored.

Uses its own database (`trainyard_bench_requests`, recreated each run) and Redis database
(`BENCH_RUNNER_REQUESTS_REDIS_URL`, default db 13, flushed).

    .venv/bin/python bench/bench_runner_requests.py
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from common import funded_org  # noqa: E402
from live_stack import database_url, group_cpu_s, setup_django, web_answers  # noqa: E402

BENCH_DB = "trainyard_bench_requests"
REDIS_URL = os.environ.get("BENCH_RUNNER_REQUESTS_REDIS_URL", "redis://127.0.0.1:6379/13")
REQUESTS = int(os.environ.get("BENCH_RUNNER_REQUESTS", 3000))
CONCURRENCY = int(os.environ.get("BENCH_RUNNER_REQUESTS_CONCURRENCY", 8))
ATTEMPTS = 96  # a third for each server, a third in process
BUNDLE = int(os.environ.get("BENCH_RELAY_BUNDLE", 100))
SERVERS = {
    "as deployed": "config.test_settings",
    "Django's default chain": "bench.baseline_middleware_settings",
}
ROUNDS = 3
SERVER_ENV = {
    "DATABASE_URL": database_url(BENCH_DB),
    "REDIS_URL": REDIS_URL,
    "ALLOWED_HOSTS": "127.0.0.1",
    "DATABASE_POOL": "1",  # pooled, as deployed
    "PYTHONPATH": str(HERE.parent),
}


def live_attempts(count: int) -> list[tuple[str, str]]:
    """(job id, runner token) of `count` jobs whose first attempt is live, as dispatch
    leaves it (the runner endpoints check the token and the attempt, not a process), on a
    database made anew."""
    import redis

    os.environ["ALLOWED_HOSTS"] = "127.0.0.1"  # the in-process client's host
    setup_django(BENCH_DB, REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    from apps.jobs import services
    from apps.jobs.execution.tokens import token_for
    from apps.jobs.models import Attempt, Job

    org = funded_org("bench-requests")
    payload = {
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
        "container": {"image": "python:3.11-slim", "command": ["python", "train.py"]},
    }
    attempts = []
    for n in range(count):
        job = services.job_create(
            organization=org, payload={**payload, "name": f"bench-{n}"}, idempotency_key=None
        ).job
        attempt = Attempt.objects.create(job=job, number=1, accelerator="cpu", gpu_count=1)
        Job.objects.filter(pk=job.pk).update(attempt_count=1)
        attempts.append((job.public_id, token_for(attempt.token_nonce)))
    return attempts


class Runners:
    """Plays the attempts' runners against one server: started, then batches and beats."""

    def __init__(self, port: int, attempts: list[tuple[str, str]]) -> None:
        self.port = port
        self.attempts = attempts
        self.seqs = {job_id: 0 for job_id, _ in attempts}
        self.sent_lines = 0

    async def post(self, path: str, body: dict, auth: str = "") -> bytes:
        """POST `body` as JSON on a connection of its own; the whole answer."""
        data = json.dumps(body).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(
                (
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{auth}"
                    "X-Trainyard-Protocol: 1\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                ).encode()
                + data
            )
            await writer.drain()
            return await reader.read()
        finally:
            writer.close()

    async def request(self, job_id: str, token: str, what: str, body: dict) -> int:
        path = f"/api/v1/runner/jobs/{job_id}/{what}"
        answer = await self.post(path, body, f"Authorization: Bearer {token}\r\n")
        return int(answer.split(b" ", 2)[1])

    def next_request(self, n: int) -> tuple[str, str, str, dict]:
        """Request `n` of the mix: (job id, token, endpoint, body)."""
        job_id, token = self.attempts[n % len(self.attempts)]
        if n % 5 == 4:
            return job_id, token, "heartbeat", {"last_seq": 0}
        self.seqs[job_id] += 1
        seq = self.seqs[job_id]
        self.sent_lines += 1
        line = {
            "seq": seq,
            "ts": datetime.now(UTC).isoformat(),
            "source": "user",
            "stream": "stdout",
            "message": f"tick {seq}",
        }
        return job_id, token, "logs", {"lines": [line]}

    async def one(self, n: int) -> None:
        status = await self.request(*self.next_request(n))
        assert status == 200, f"request {n}: HTTP {status}"

    def in_process(self, requests: int) -> float:
        """The same mix through Django's test client here; this process's CPU seconds."""
        from django.test import Client

        clients = {
            token: Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="127.0.0.1")
            for _, token in self.attempts
        }
        started = time.process_time()
        for n in range(requests):
            job_id, token, what, body = self.next_request(n)
            response = clients[token].post(
                f"/api/v1/runner/jobs/{job_id}/{what}",
                json.dumps(body),
                content_type="application/json",
                HTTP_X_TRAINYARD_PROTOCOL="1",
            )
            assert response.status_code == 200, f"request {n}: HTTP {response.status_code}"
        return time.process_time() - started

    async def bundle(self, first: int, count: int) -> None:
        """Calls `first` to `first + count - 1` of the mix in one `POST relay`."""
        entries = []
        for n in range(first, first + count):
            job_id, token, what, body = self.next_request(n)
            entries.append({"job_id": job_id, "token": token, "call": what, "body": body})
        answer = await self.post("/api/v1/runner/relay", {"entries": entries})
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] == b"200", head
        if b"transfer-encoding: chunked" in head.lower():
            payload = payload.split(b"\r\n", 1)[1].rsplit(b"\r\n0\r\n", 1)[0]
        statuses = {result["status"] for result in json.loads(payload)["results"]}
        assert statuses == {200}, statuses

    async def relayed_round(self, calls: int) -> None:
        size = len(self.attempts)
        starts = iter(range(0, calls, size))

        async def relay() -> None:
            for first in starts:
                await self.bundle(first, min(size, calls - first))

        await asyncio.gather(relay(), relay())

    async def round(self, requests: int) -> None:
        queue = iter(range(requests))

        async def worker() -> None:
            for n in queue:
                await self.one(n)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def stored_lines() -> int:
    from apps.jobs.models import LogLine

    return LogLine.objects.filter(source="user").count()


def main() -> int:
    from tests.live import free_port, process_group, wait_until

    attempts = live_attempts(ATTEMPTS + BUNDLE)
    relayed_attempts, attempts = attempts[ATTEMPTS:], attempts[:ATTEMPTS]
    here = Runners(0, attempts[2::3])
    relayed = Runners(0, relayed_attempts)  # their calls go in bundles
    relayed_ms: list[float] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(SERVER_ENV)
    cpu_ms: dict[str, list[float]] = {name: [] for name in SERVERS}
    rates: dict[str, list[float]] = {name: [] for name in SERVERS}
    in_process_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-requests-") as workdir, ExitStack() as stack:
        servers = {}
        for i, (name, settings_module) in enumerate(SERVERS.items()):
            port = free_port()
            args = [
                str(Path(sys.executable).parent / "uvicorn"),
                "config.asgi:application",
                *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
            ]
            log = Path(workdir) / f"web-{i}.log"
            server_env = {**env, "DJANGO_SETTINGS_MODULE": settings_module}
            web = stack.enter_context(process_group(args, env=server_env, log=log))
            wait_until(lambda p=port: web_answers(p), timeout=30, what=f"uvicorn on :{port}")
            servers[name] = (web, Runners(port, attempts[i::3]), log)
        for _ in range(ROUNDS):
            for name, (web, runners, log) in servers.items():
                cpu, began = group_cpu_s(web.pid), time.perf_counter()
                try:
                    asyncio.run(runners.round(REQUESTS))
                except Exception:
                    print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
                    raise
                rates[name].append(REQUESTS / (time.perf_counter() - began))
                cpu_ms[name].append(1000 * (group_cpu_s(web.pid) - cpu) / REQUESTS)
            in_process_ms.append(1000 * here.in_process(REQUESTS) / REQUESTS)
            web, runners, _ = servers["as deployed"]
            relayed.port = runners.port
            cpu = group_cpu_s(web.pid)
            asyncio.run(relayed.relayed_round(REQUESTS))
            relayed_ms.append(1000 * (group_cpu_s(web.pid) - cpu) / REQUESTS)
        sent = here.sent_lines + sum(runners.sent_lines for _, runners, _ in servers.values())
        sent += relayed.sent_lines
    assert stored_lines() == sent, f"{stored_lines():,} lines stored, {sent:,} sent"

    print(
        f"runner requests ({REQUESTS:,} a round, {ROUNDS} rounds each, taking turns; "
        f"{CONCURRENCY} in flight, a connection each; 4 one-line log batches per heartbeat; "
        f"every line stored: {sent:,})"
    )
    medians = {name: statistics.median(values) for name, values in cpu_ms.items()}
    for name, value in medians.items():
        rate = statistics.median(rates[name])
        print(f"  {name:<24} web CPU {value:5.2f} ms per request, {rate:4.0f} requests/s")
    baseline = statistics.median(in_process_ms)
    print(f"  {'in process (reference)':<24}         {baseline:5.2f} ms per request")
    deployed, default_chain = medians.values()
    print(f"  ratio as deployed ÷ Django's default chain: {deployed / default_chain:.2f}")
    per_call = statistics.median(relayed_ms)
    label = f"relayed, {BUNDLE} a bundle"
    print(
        f"  {label:<24} web CPU {per_call:5.2f} ms per runner call (as deployed); "
        f"ratio relayed ÷ alone: {per_call / deployed:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
