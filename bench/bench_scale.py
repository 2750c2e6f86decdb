"""Many jobs alive at once: how far one small control plane goes on this machine (#19).

The real stack runs (uvicorn web with `BENCH_SCALE_WEB_WORKERS` processes, default 1, a
Celery worker of concurrency `BENCH_SCALE_WORKER_CONCURRENCY`, default 2, beat) with
production timings (5 s reconcile tick, 5 s heartbeats, `live_stack.production_stack`), on a
database of its own (`trainyard_bench_scale`) and Redis db 9 (`BENCH_SCALE_REDIS_URL`,
flushed). Two kinds of levels, one after the other:

- **Protocol load generator** (`scale_loadgen.py`, labelled `loadgen` below): N jobs
  submitted through the API and dispatched by the worker onto a local host provider whose
  "runner" is a shell script that hands its token to the generator and becomes `sleep`; the
  generator then speaks the runner protocol over HTTP for all N attempts (spec, started, a
  line a second in batches, heartbeats, exit). Levels `BENCH_SCALE_LOADGEN` (default
  100,1000,3000).
- **Real runners** (`real`): N jobs whose workload prints a line a second, each run by the
  real runner (`python -m runner`) on the local host provider. Levels `BENCH_SCALE_REAL`
  (default 50,200,400); memory per runner is the PSS of the runner and its workload.

For each level: the N submits are POSTed (8 at a time) and timed until all N jobs are
`running` (the dispatch figure, with p50/p95 of when the jobs were submitted, allocated,
launched and running: where they queued). Then, for `BENCH_SCALE_WINDOW_S` (default 30): reconcile
pass durations (the worker's `reconcile: ... in Xs` lines), heartbeat round trips and
ingestion lag (loadgen: from a line's print to the answer that stored it; real: a line's
runner timestamp to the first time this script sees it stored, sampled every 0.25 s on 20
jobs), PostgreSQL connections (pg_stat_activity, sampled each second) and event to screen
on one of the level's job pages in Chromium (`BENCH_SCALE_EVENTS`, default 40, events
committed here, timed to the row in the DOM, as `bench_live.py` does). Then every attempt
ends (loadgen: exit 0; real: terminate through the API) and the next level starts on an
empty machine.
Idle values come first: one attempt, heartbeating every 0.2 s, and event to screen with no
load. A level that cannot get all its jobs running within `BENCH_SCALE_DISPATCH_TIMEOUT_S`
(default 300) is reported as where it stops. `BENCH_SCALE_ALWAYS_HEARTBEAT=1` has the
generator heartbeat on schedule even while its batches' answers carry the order (as runners
did before), to measure what folding heartbeats into batches saves.
`BENCH_SCALE_RELAY_HOSTS=H` spreads the generator's attempts over H hosts, each behind a host
relay (`runner.relay`, played by the generator) that carries its attempts' log batches and
heartbeats to `POST relay` in bundles (two lanes: batches, and heartbeats on their own); the
notes then give the bundles' mean size and the web CPU per runner call. Every
`BENCH_SCALE_QUIET_EVERY`-th (default 10th) of a level's generated attempts prints nothing
and so heartbeats every 5 s: a level's heartbeat figure is made of theirs (the others' batch
answers stand in for heartbeats, and they send almost none). 0: every attempt prints.
`BENCH_SCALE_PEOPLE_WEB=1` serves people (the browser, the API submits) from a second web
process and the runners from the first, as docs/scaling.md suggests; the cores
then name it `people`.
`BENCH_SCALE_REAL_RELAY=1` has the real runners talk through one host relay
(`python -m runner.relay`, started with the stack, named by the real provider's `relay_url`)
instead of each on its own.
`BENCH_SCALE_RELAY_ONE_LANE=1` has the played relays send heartbeats in the batches' bundles,
as the relay did before heartbeats had a lane of their own;
`BENCH_SCALE_RELAY_BATCH_INTERVAL_MS` (default 200, the relay's) sets the least time between
two bundles of batches (0: as soon as the last is back, as before).

Targets (#19, at 1,000 live attempts): reconcile p95 ≤ 2 s; heartbeat p95 ≤ 10x idle;
ingestion lag p95 ≤ 2 s; event to screen p95 ≤ 3x idle; 1,000 submits → all running ≤ 60 s;
reconcile p50 at 1,000 ÷ at 100 ≤ 12.

    .venv/bin/python bench/bench_scale.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import JobsApi  # noqa: E402

BENCH_DB = "trainyard_bench_scale"
REDIS_URL = os.environ.get("BENCH_SCALE_REDIS_URL", "redis://127.0.0.1:6379/9")
LOADGEN_LEVELS = [
    int(n) for n in os.environ.get("BENCH_SCALE_LOADGEN", "100,1000,3000").split(",") if n
]
REAL_LEVELS = [int(n) for n in os.environ.get("BENCH_SCALE_REAL", "50,200,400").split(",") if n]
WINDOW_S = float(os.environ.get("BENCH_SCALE_WINDOW_S", 30))
# 40: the p95 of ten was their slowest one, and swung with it from run to run.
EVENTS = int(os.environ.get("BENCH_SCALE_EVENTS", 40))
DISPATCH_TIMEOUT_S = float(os.environ.get("BENCH_SCALE_DISPATCH_TIMEOUT_S", 300))
WEB_WORKERS = int(os.environ.get("BENCH_SCALE_WEB_WORKERS", 1))  # uvicorn --workers
# celery --concurrency: dispatches run side by side in this many worker processes
WORKER_CONCURRENCY = int(os.environ.get("BENCH_SCALE_WORKER_CONCURRENCY", 2))
# The generator's attempts beat on schedule even while batches' answers stand in for their
# heartbeats, as runners did before those answers carried an order (a before/after switch).
ALWAYS_HEARTBEAT = os.environ.get("BENCH_SCALE_ALWAYS_HEARTBEAT", "") not in ("", "0")
# The generator's attempts spread over this many hosts, each with a host relay bundling
# their log batches and heartbeats (`runner.relay`); 0: every runner talks on its own.
RELAY_HOSTS = int(os.environ.get("BENCH_SCALE_RELAY_HOSTS", 0))
RELAYED = ("logs", "heartbeat")
# People's web process: the browser and the API submits go to a web process of their own,
# the runners (and their relays) to the stack's, as TRAINYARD_PUBLIC_URL tells them.
PEOPLE_WEB = os.environ.get("BENCH_SCALE_PEOPLE_WEB", "") not in ("", "0")
# The generator's relays send heartbeats with the batches, one bundle at a time, as the
# relay did before heartbeats had a lane of their own (a before/after switch).
RELAY_ONE_LANE = os.environ.get("BENCH_SCALE_RELAY_ONE_LANE", "") not in ("", "0")
# The played relays' least time between two bundles of batches (`runner.relay`'s
# --batch-interval-ms; 0: one as soon as the last is back, as before it had one).
RELAY_BATCH_INTERVAL_MS = float(os.environ.get("BENCH_SCALE_RELAY_BATCH_INTERVAL_MS", 200))
BUNDLES = ("bundle", "beat bundle")  # the generator's kinds for a relay's two lanes
# The real runners talk through one host relay (`python -m runner.relay`, started here, its
# address the real provider's `relay_url`), as docs/scaling.md suggests.
REAL_RELAY = os.environ.get("BENCH_SCALE_REAL_RELAY", "") not in ("", "0")
# Every K-th of the generator's attempts prints nothing and so heartbeats on schedule (a
# job loading its model, between epochs): the heartbeats the level's figure is made of.
# The others' batch answers stand in for their heartbeats and they send almost none.
QUIET_EVERY = int(os.environ.get("BENCH_SCALE_QUIET_EVERY", 10))
PRICE_MICROS = 10_000
WORKLOAD = 'i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 1; done'
# Product limits a thousand submits from one organization would hit; the bench lifts them.
STACK_ENV = {"API_REQUESTS_PER_MINUTE": "1000000", "MAX_WAITING_JOBS_PER_ORG": "100000"}
PASS_LINE = re.compile(rb"reconcile: \{.*?\} in ([0-9.]+)s")
STAGES = ("submitted", "allocated", "launched", "running")
LIVE = ("allocating", "provisioning", "running", "finalizing", "terminating")


def pct(values, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Api(JobsApi):
    """Under load: generous timeouts, and a refused submit counted rather than raised."""

    def __init__(self, base: str, key: str) -> None:
        super().__init__(base, key, timeout_s=120)

    def submit(self, name: str, command: list[str]) -> str:
        response = self.post_job(name, command)
        if response.status_code != 201:  # counted as a failed submit; the level goes on
            return f"error {response.status_code}: {response.text[:200]}"
        return response.json()["id"]


def count(name: str, states) -> int:
    from apps.jobs.models import Job

    return Job.objects.filter(name=name, state__in=states).count()


def submit_all(
    api: Api, name: str, n: int, command: list[str], timings: dict | None = None
) -> tuple[float | None, list[str]]:
    """POST n jobs 8 at a time; seconds from the first POST until all n run (None: not in
    DISPATCH_TIMEOUT_S). `timings` gets `submitted_s`, when the last POST was answered."""
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: api.submit(name, command), range(n)))
    if timings is not None:
        timings["submitted_s"] = time.monotonic() - started
    ids = [answer for answer in answers if not answer.startswith("error ")]
    SUBMIT_ERRORS[name] = [answer for answer in answers if answer.startswith("error ")]
    deadline = started + DISPATCH_TIMEOUT_S
    while count(name, ["running"]) < len(ids):
        if time.monotonic() > deadline:
            return None, ids
        time.sleep(0.25)
    return time.monotonic() - started, ids


SUBMIT_ERRORS: dict[str, list[str]] = {}  # per level, the answers of submits that failed


def end_level(api: Api, name: str, timeout: float = 600) -> None:
    """Wait until every job of the level has ended. A job still waiting for a place or a
    runner's start after a while (its attempt lost after the generator let go of it, and
    placed again: no one plays its runner) is terminated, and again every 30 s."""
    deadline = time.monotonic() + timeout
    next_sweep = time.monotonic() + 30
    while count(name, ["requested", "preempted", *LIVE]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs {name} did not end")
        if time.monotonic() > next_sweep:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(api.terminate, unplayed(name)))
            next_sweep = time.monotonic() + 30
        time.sleep(0.5)


class Sampler(threading.Thread):
    """PostgreSQL connections each second; for real levels, ingestion lag of 20 jobs."""

    def __init__(self, job_ids: list[str] | None = None) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.connections: list[int] = []
        self.lag: list[float] = []
        self.job_ids = (job_ids or [])[:20]

    def run(self) -> None:
        import psycopg
        from live_stack import database_url

        seen: dict[int, int] = {}
        with psycopg.connect(database_url(BENCH_DB), autocommit=True) as conn:
            pks = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM jobs_job WHERE public_id = ANY(%s)", [self.job_ids]
                )
            ]
            next_count = 0.0
            while not self.stop.is_set():
                now = time.time()
                if now >= next_count:
                    (n,) = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [BENCH_DB]
                    ).fetchone()
                    self.connections.append(n - 1)  # not this one
                    next_count = now + 1
                if pks:
                    rows = conn.execute(
                        "SELECT j.id, l.seq, l.timestamp FROM unnest(%s::bigint[]) AS j(id) "
                        "CROSS JOIN LATERAL (SELECT seq, timestamp FROM jobs_logline "
                        "WHERE job_id = j.id AND source = 'user' ORDER BY id DESC LIMIT 1) l",
                        [pks],
                    ).fetchall()
                    seen_at = time.time()
                    for pk, seq, stamp in rows:
                        if seq is not None and seq != seen.get(pk):
                            if pk in seen:  # the first look says nothing of when it came
                                self.lag.append(seen_at - stamp.timestamp())
                            seen[pk] = seq
                self.stop.wait(0.25)


def reconcile_passes(log: Path, start: int) -> list[float]:
    return [float(m.group(1)) for m in PASS_LINE.finditer(log.read_bytes()[start:])]


class Browser:
    """A signed-in Chromium page, for event to screen."""

    def __init__(self, base_url: str, user) -> None:
        from bench_live import CHROMIUM, CHROMIUM_ARGS, PASSWORD
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.context = self.browser.new_context(
            base_url=base_url, viewport={"width": 1280, "height": 900}
        )
        self.page = self.context.new_page()
        self.page.goto("/accounts/login/")
        self.page.get_by_label("Username").fill(user.username)
        self.page.get_by_label("Password").fill(PASSWORD)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(lambda url: "/accounts/login" not in url)
        self.writer = ThreadPoolExecutor(1)

    def event_to_screen(self, job_public_id: str) -> list[float]:
        from bench_live import MARKS_JS, WATCH_JS, commit_event

        from apps.jobs.models import Job

        job = self.writer.submit(Job.objects.get, public_id=job_public_id).result()
        self.page.goto(f"/o/bench-scale/jobs/{job.public_id}/")
        self.page.locator("#live-indicator.on").wait_for(timeout=30_000)
        self.page.evaluate(WATCH_JS)
        out = []
        for i in range(EVENTS + 1):
            event_id, committed, _ = self.writer.submit(commit_event, job, i).result()
            handle = self.page.wait_for_function(MARKS_JS, arg=f"evt-{event_id}", timeout=30_000)
            _, dom, _ = handle.json_value()
            out.append(dom - committed)
        return out[1:]  # the first is a warm-up

    def close(self) -> None:
        self.writer.shutdown()
        self.browser.close()
        self.playwright.stop()


class Loadgen:
    def __init__(
        self, url: str, fifo: Path, heartbeat_s: float = 0.0, quiet_every: int = 0
    ) -> None:
        args = [sys.executable, str(HERE / "scale_loadgen.py"), "--url", url, "--fifo", str(fifo)]
        if heartbeat_s:
            args += ["--heartbeat-s", str(heartbeat_s)]
        if quiet_every:
            args += ["--quiet-every", str(quiet_every)]
        if ALWAYS_HEARTBEAT:
            args.append("--always-heartbeat")
        if RELAY_HOSTS:
            args += ["--relay-hosts", str(RELAY_HOSTS)]
        if RELAY_ONE_LANE:
            args.append("--one-lane")
        args += ["--batch-interval-ms", str(RELAY_BATCH_INTERVAL_MS)]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def command(self, what: str) -> str:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def finish(self) -> dict:
        failures = json.loads(self.command("exit"))
        self.proc.stdout.readline()  # done
        self.proc.wait(timeout=60)
        return failures


def pss_mib(pid: int) -> float:
    """PSS of `pid` and its descendants, MiB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total / 1024


def setup(root: Path):
    """An organization with credits, an API key and a member who signs in; the loadgen and
    real providers (host runtime, one cpu offer each, room for every level)."""
    from bench_live import PASSWORD
    from common import api_key, funded_org

    from apps.accounts.models import Membership, Role, User
    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    org = funded_org("bench-scale", credits_micros=10**13)
    key = api_key(org)
    user = User.objects.create(username="bench-live", email="bench-scale@example.com")
    user.set_password(PASSWORD)
    user.save()
    Membership.objects.create(user=user, organization=org, role=Role.MEMBER)
    fifo = root / "launches"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    shim = root / "loadgen-runner"
    shim.write_text(__import__("scale_loadgen").SHIM.format(fifo=fifo))
    shim.chmod(0o755)
    cpu = Accelerator.objects.get(name="cpu")
    Offer.objects.update(enabled=False)
    capacity = max([*LOADGEN_LEVELS, *REAL_LEVELS, 1]) + 10
    for name, extra in (("loadgen", {"python": str(shim)}), ("real", {})):
        (root / name).mkdir(mode=0o755)
        provider = Provider.objects.create(
            name=f"scale-{name}",
            kind=Provider.Kind.LOCAL,
            config={"runtime": "host", "multi_tenant": True, "work_dir": str(root / name), **extra},
        )
        Offer.objects.create(
            provider=provider,
            accelerator=cpu,
            gpu_counts=[1],
            capacity=capacity,
            price_per_gpu_hour_micros=PRICE_MICROS,
            min_price_per_gpu_hour_micros=PRICE_MICROS,
            max_price_per_gpu_hour_micros=PRICE_MICROS,
            enabled=False,
        )
    return key, user, fifo


def route_to(name: str) -> None:
    from apps.catalog.models import Offer

    Offer.objects.update(enabled=False)
    Offer.objects.filter(provider__name=f"scale-{name}").update(enabled=True)


def idle(stack, api: Api, browser: Browser, fifo: Path) -> dict:
    route_to("loadgen")
    gen = Loadgen(stack.url, fifo, heartbeat_s=0.2)
    _, ids = submit_all(api, "idle", 1, ["true"])
    gen.command("mark")
    screen = browser.event_to_screen(ids[0])
    time.sleep(max(0.0, 10 - len(screen) * 0.1))
    report = json.loads(gen.command("report"))
    gen.finish()
    end_level(api, "idle")
    return {"heartbeat": report["rtt"].get("heartbeat", []), "screen": screen}


def level(stack, api: Api, browser: Browser, fifo: Path, kind: str, n: int) -> dict:
    name = f"{kind}-{n}"
    route_to(kind)
    gen = Loadgen(stack.url, fifo, quiet_every=QUIET_EVERY) if kind == "loadgen" else None
    command = ["true"] if gen else ["sh", "-c", WORKLOAD]
    from live_stack import cpu_by_part, group_cpu_s

    groups = {name: proc.popen.pid for name, proc in stack.procs.items()}
    single = {"loadgen": gen.proc.pid} if gen else {}
    parts_before, began = cpu_by_part(groups, single), time.monotonic()
    timings: dict = {}
    to_running, ids = submit_all(api, name, n, command, timings)
    # A level whose jobs are not all running in time is still measured, with those that run.
    result: dict = {"kind": kind, "n": n, "to_running_s": to_running, **timings}
    parts, took = cpu_by_part(groups, single), time.monotonic() - began
    result["dispatch_cores"] = {k: (parts[k] - parts_before[k]) / took for k in parts}
    result["running"] = count(name, ["running"])
    result["stages"] = dispatch_stages(name)
    result["submit_errors"] = len(SUBMIT_ERRORS.get(name, []))
    if SUBMIT_ERRORS.get(name):
        print(f"{name}: {len(SUBMIT_ERRORS[name])} submits failed, e.g. {SUBMIT_ERRORS[name][0]}")
    worker_log = stack.procs["worker"].log
    start = worker_log.stat().st_size
    sampler = Sampler(ids if gen is None else None)
    sampler.start()
    if gen:
        gen.command("mark")
    web_pgid = stack.procs["web"].popen.pid
    web_cpu_before = group_cpu_s(web_pgid)
    parts_before = cpu_by_part(groups, single)
    began = time.monotonic()
    try:
        result["screen"] = browser.event_to_screen(ids[0])
    except Exception as exc:  # the page did not load or update in time: that is a finding
        result["screen"], result["screen_error"] = [], f"{type(exc).__name__}: {exc}"[:200]
    time.sleep(max(0.0, WINDOW_S - (time.monotonic() - began)))
    sampler.stop.set()
    sampler.join()
    result["passes"] = reconcile_passes(worker_log, start)
    result["connections"] = sampler.connections
    web_cpu = group_cpu_s(web_pgid) - web_cpu_before
    window = time.monotonic() - began
    parts = cpu_by_part(groups, single)
    result["cores"] = {name: (parts[name] - parts_before[name]) / window for name in parts}
    if gen:
        report = json.loads(gen.command("report"))
        calls = sum(len(times) for kind, times in report["rtt"].items() if kind not in BUNDLES)
        requests = sum(
            len(times)
            for kind, times in report["rtt"].items()
            if not (RELAY_HOSTS and kind in RELAYED)
        )
        result["web_cpu_ms_per_request"] = 1000 * web_cpu / max(1, requests)
        result["web_cpu_ms_per_call"] = 1000 * web_cpu / max(1, calls)
        result["bundle_sizes"] = report.get("bundle_sizes", {})
        result["heartbeat"] = report["rtt"].get("heartbeat", [])
        result["batch_rtt"] = report["rtt"].get("logs", [])
        result["requests_per_attempt_s"] = requests / max(1, n) / report["window_s"]
        result["lag"] = report["lag"]
        result["errors"] = report["errors"]
    else:
        result["lag"] = sampler.lag
        result["pss_mib_per_runner"] = runner_memory(name)
    print(json.dumps(result), flush=True)  # measured: a level that fails to end keeps them
    if gen:
        gen.finish()
        # A job placed again after the generator let go of it (its attempt was lost) has no
        # one to play its runner any more: end it.
        ids = unplayed(name)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(api.terminate, ids))
    end_level(api, name)
    return result


def dispatch_stages(name: str) -> dict:
    """Where the level's jobs spent the way to `running`, seconds from the first submit:
    p50/p95 of when each was submitted (created), allocated, launched (runner started) and
    running. A stage whose times trail the one before it is where jobs queue."""
    from django.db.models import Min

    from apps.jobs.models import Attempt, Job

    jobs = Job.objects.filter(name=name)
    first = jobs.aggregate(first=Min("created_at"))["first"]
    if first is None:
        return {}
    rows = Attempt.objects.filter(job__name=name, number=1).values_list(
        "job__created_at", "allocated_at", "launched_at", "started_at"
    )
    columns = list(zip(*rows, strict=True)) if rows else []
    out = {}
    for stage, values in zip(STAGES, columns, strict=False):
        seconds = [(value - first).total_seconds() for value in values if value is not None]
        out[stage] = (pct(seconds, 0.5), pct(seconds, 0.95))
    return out


def unplayed(name: str) -> list[str]:
    """The level's jobs waiting for a place or a runner's start."""
    from apps.jobs.models import Job

    states = ("requested", "preempted", "allocating", "provisioning")
    return list(Job.objects.filter(name=name, state__in=states).values_list("public_id", flat=True))


def runner_memory(name: str) -> float | None:
    from apps.jobs.models import Attempt

    pids = [
        h["pid"]
        for h in Attempt.objects.filter(job__name=name, ended_at__isnull=True).values_list(
            "handle", flat=True
        )
        if "pid" in h
    ]
    return sum(pss_mib(pid) for pid in pids) / len(pids) if pids else None


def fmt(value, unit: str = "", scale: float = 1.0) -> str:
    return "—" if value is None else f"{value * scale:.{0 if scale == 1000 else 2}f}{unit}"


def report(idle_values: dict, results: list[dict]) -> None:
    hb_idle = pct(idle_values["heartbeat"], 0.95)
    screen_idle = pct(idle_values["screen"], 0.95)
    print(
        f"idle: heartbeat p95 {fmt(hb_idle, ' ms', 1000)}, event to screen p95 {screen_idle:.0f} ms"
    )
    head = (
        "level            to running  reconcile p50/p95   heartbeat p95 (xidle)  "
        "lag p95   screen p95 (xidle)  PG conns max  notes"
    )
    print(head, flush=True)
    for r in results:
        label = f"{r['kind']} {r['n']}"
        passes = r["passes"]
        hb = pct(r.get("heartbeat"), 0.95)
        screen = pct(r["screen"], 0.95)
        notes = []
        if r["submit_errors"]:
            notes.append(f"{r['submit_errors']} submits failed")
        if r["to_running_s"] is None:
            notes.append(f"only {r['running']}/{r['n']} running after {DISPATCH_TIMEOUT_S:.0f} s")
        if r.get("pss_mib_per_runner") is not None:
            notes.append(f"{r['pss_mib_per_runner']:.1f} MiB/runner (PSS)")
        if r.get("batch_rtt") is not None:
            notes.append(
                f"{len(r['heartbeat'])} heartbeats, batch p95 "
                f"{fmt(pct(r['batch_rtt'], 0.95), ' ms', 1000)}, "
                f"{r['requests_per_attempt_s']:.2f} requests/s per attempt, "
                f"web CPU {r['web_cpu_ms_per_request']:.1f} ms per request"
            )
        if r.get("bundle_sizes"):
            lanes = r["bundle_sizes"]
            notes.append(
                ", ".join(
                    f"{len(sizes)} {kind}s of {sum(sizes) / len(sizes):.0f} calls on average"
                    for kind, sizes in lanes.items()
                )
                + f", web CPU {r['web_cpu_ms_per_call']:.2f} ms per runner call"
            )
        if r.get("errors"):
            notes.append(f"errors {r['errors']}")
        if r.get("submitted_s") is not None:
            notes.append(f"all {r['n']} submits answered in {r['submitted_s']:.1f} s")
        for key, what in (("dispatch_cores", "cores until all running"), ("cores", "cores")):
            if r.get(key):
                busiest = sorted(r[key].items(), key=lambda item: -item[1])
                notes.append(
                    f"{what}: " + ", ".join(f"{k} {v:.2f}" for k, v in busiest if v >= 0.01)
                )
        if r.get("stages"):
            notes.append(
                "from the first submit, p50/p95 s: "
                + ", ".join(
                    f"{stage} {fmt(p50)}/{fmt(p95)}" for stage, (p50, p95) in r["stages"].items()
                )
            )
        if r.get("screen_error"):
            notes.append(f"job page: {r['screen_error'].splitlines()[0]}")
        hb_text = "—" if hb is None else f"{hb * 1000:.0f} ms ({hb / hb_idle:.1f}x)"
        screen_text = "—" if screen is None else f"{screen:.0f} ms ({screen / screen_idle:.1f}x)"
        print(
            f"{label:<16} {fmt(r['to_running_s'], ' s'):>10}  "
            f"{fmt(pct(passes, 0.5), ' s')}/{fmt(pct(passes, 0.95), ' s')} ({len(passes)})  "
            f"{hb_text:<22} {fmt(pct(r['lag'], 0.95), ' s'):<9} "
            f"{screen_text:<19} "
            f"{max(r['connections'], default=0):>4}         {'; '.join(notes)}"
        )
    by_n = {r["n"]: r for r in results if r["kind"] == "loadgen" and r.get("passes")}
    if 100 in by_n and 1000 in by_n:
        ratio = pct(by_n[1000]["passes"], 0.5) / pct(by_n[100]["passes"], 0.5)
        print(f"reconcile p50 at 1,000 ÷ at 100: {ratio:.1f} (target ≤ 12)", flush=True)


def start_people_web(stack) -> str:
    """A second web process (uvicorn, one process) for people: pages, their websockets and the
    API. The stack's own web process keeps the runners, whose control URL
    (TRAINYARD_PUBLIC_URL) is its. Stopped with the stack."""
    from tests.integration.stack import Proc, web_answers
    from tests.live import BIN, free_port, wait_until

    port = free_port()
    args = [str(BIN / "uvicorn"), "config.asgi:application", "--host", "127.0.0.1"]
    proc = Proc(
        "people",
        [*args, "--port", str(port), "--log-level", "warning"],
        stack.workdir / "people.log",
    )
    proc.start(stack.env())
    stack.procs["people"] = proc
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: web_answers(url), timeout=30, what=f"people's web server\n{proc.tail()}")
    return url


def start_real_relay(stack) -> None:
    """One host relay for the real runners (a process of the stack, stopped with it); the
    real provider's runners are told its address."""
    from apps.providers.models import Provider
    from tests.integration.stack import Proc
    from tests.live import free_port, wait_until

    port = free_port()
    proc = Proc(
        "relay",
        [
            sys.executable,
            "-m",
            "runner.relay",
            "--listen",
            f"127.0.0.1:{port}",
            "--upstream",
            stack.url,
        ],
        stack.workdir / "relay.log",
    )
    proc.start(stack.env())
    stack.procs["relay"] = proc
    wait_until(lambda: _listening(port), timeout=30, what=f"the host relay\n{proc.tail()}")
    provider = Provider.objects.get(name="scale-real")
    provider.config = {**provider.config, "relay_url": f"http://127.0.0.1:{port}"}
    provider.save(update_fields=["config"])


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def main() -> int:
    from live_stack import production_stack, setup_django, stop_runners

    setup_django(BENCH_DB, REDIS_URL)
    import redis

    # The database is new, so user ids start again: a Redis kept from an earlier run would
    # still count that run's sockets against the new user of the same id (at 20 every job
    # page's socket is refused, and event to screen fails whatever the load).
    redis.Redis.from_url(REDIS_URL).flushdb()
    os.environ.update(STACK_ENV)
    results: list[dict] = []
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    root.chmod(0o755)  # the runners run as nobody: they must reach their shim and workdirs
    stack = production_stack(BENCH_DB, REDIS_URL, root / "stack")
    stack.web_workers = WEB_WORKERS
    stack.worker_concurrency = WORKER_CONCURRENCY
    (root / "stack").mkdir()
    browser = None
    try:
        key, user, fifo = setup(root)
        stack.start()
        # Playwright's sync API keeps an event loop in this thread; this script's own queries
        # are plain blocking ones (the pushes that need async_to_sync run in Browser.writer).
        # Set after the stack started, so its processes never see it.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        people_url = start_people_web(stack) if PEOPLE_WEB else stack.url
        if REAL_RELAY:
            start_real_relay(stack)
        api = Api(people_url, key)
        browser = Browser(people_url, user)
        idle_values = idle(stack, api, browser, fifo)
        print(json.dumps({"idle": idle_values}), flush=True)
        # Each level prints its raw figures once measured, then the table so far: a run
        # cut short still says what it measured.
        levels = [("loadgen", n) for n in LOADGEN_LEVELS] + [("real", n) for n in REAL_LEVELS]
        for kind, n in levels:
            last = results[-1] if results else None
            if kind == "real" and last and last["kind"] == "real" and last["to_running_s"] is None:
                break  # the machine holds no more real runners
            results.append(level(stack, api, browser, fifo, kind, n))
            report(idle_values, results)
    except Exception:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        if browser is not None:
            browser.close()
        stack.stop()
        stop_runners()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
