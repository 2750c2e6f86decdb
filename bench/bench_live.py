"""The live job page in real Chromium: event to screen, and page load at scale.

1. Event to screen: a job page open in Chromium (signed in through the login form, socket
   open), then `BENCH_LIVE_EVENTS` events (default 50), one at a time: this process commits
   `record_event` in a transaction; the page notes when the row `#evt-<id>` enters the DOM.
   Timed from the commit (an on_commit callback registered before the event's own push, so
   it runs first) to the MutationObserver's callback, both on this machine's wall clock
   (`time.time()` here, `performance.timeOrigin + performance.now()` there). Baseline: a
   bare Redis publish → subscriber round trip (redis-py, the subscriber in a thread of
   this process), median of 100. Also printed: where the time goes (this process's push
   after commit; push sent → the socket's message in the page; message → row in the DOM;
   row → the next frame) and the push's steps timed in-process.
2. Page load at scale: the job page of a job with 10,000 events, 100,000 log lines and
   2,000 metric points against an empty job's, median of 15 loads each in Chromium (the
   Navigation Timing API: start to the end of the `load` event) and of the HTML alone
   (requests with the browser's session cookie against the same server). Target:
   big/empty <= 1.5. A third job holds just what the page shows (200 events, 200 log lines,
   2,000 points: the windows and the chart's cap), to tell the cost of the rows in the
   tables from the cost of the rows on the page. The three take turns.

Only the web server (uvicorn) runs, from `tests.integration.stack.Stack`: no Celery worker
or beat, so the jobs stay `requested` and every event is this script's. Chromium is
Debian's (/usr/bin/chromium), driven by Playwright with the browser tests' flags. Uses its
own database (`trainyard_bench_live`, recreated each run) and Redis database
(`BENCH_LIVE_REDIS_URL`, default db 13, flushed). The server and the browser are stopped at
the end, also on failure.

    .venv/bin/python bench/bench_live.py
"""

from __future__ import annotations

import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
BENCH_DB = "trainyard_bench_live"
DATABASE_URL = f"{ADMIN_URL.rsplit('/', 1)[0]}/{BENCH_DB}"
REDIS_URL = os.environ.get("BENCH_LIVE_REDIS_URL", "redis://127.0.0.1:6379/13")
EVENTS = int(os.environ.get("BENCH_LIVE_EVENTS", 50))
RTT_SAMPLES = 100
PROFILE_SAMPLES = 30
LOADS = 15
BIG_EVENTS = 10_000
BIG_LOG_LINES = 100_000
BIG_METRICS = 2_000
TARGET = 1.5
PASSWORD = "correct-horse-battery"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As tests/browser/conftest.py launches it.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# Installed in the page once: the wall-clock time (ms) each event row entered the DOM, the
# next animation frame after that, and when the socket's message carrying it arrived.
WATCH_JS = """() => {
  const now = () => performance.timeOrigin + performance.now();
  const marks = (window.__bench = { dom: {}, frame: {}, message: {} });
  new MutationObserver((records) => {
    const t = now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.id && node.id.startsWith("evt-") && !(node.id in marks.dom)) {
          marks.dom[node.id] = t;
          requestAnimationFrame(() => { marks.frame[node.id] = now(); });
        }
      }
    }
  }).observe(document.getElementById("events-body"), { childList: true });
  document.addEventListener("htmx:wsBeforeMessage", (event) => {
    const t = now();
    for (const match of event.detail.message.matchAll(/id="(evt-\\d+)"/g)) {
      marks.message[match[1]] ??= t;
    }
  });
}"""
MARKS_JS = """(id) => {
  const b = window.__bench;
  return id in b.frame ? [b.message[id] ?? null, b.dom[id], b.frame[id]] : null;
}"""
NAV_JS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  return nav && nav.loadEventEnd > 0 ? [nav.responseEnd, nav.domContentLoadedEventEnd,
    nav.loadEventEnd].map((t) => t - nav.startTime) : null;
}"""


def recreate_database() -> None:
    import psycopg
    import redis

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    redis.Redis.from_url(REDIS_URL).flushdb()


def setup_django() -> None:
    # The same database and channel layer as the server, so this process's pushes reach it.
    os.environ["DATABASE_URL"] = DATABASE_URL
    os.environ["REDIS_URL"] = REDIS_URL
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def median(values) -> float:
    return statistics.median(values)


def p90(values) -> float:
    return statistics.quantiles(values, n=10)[-1]


def make_team():
    """An organization with compute, a member who signs in with a password, and four jobs in
    `requested` (none is ever dispatched: no worker runs)."""
    from common import funded_org

    from apps.accounts.models import Membership, Role, User
    from apps.jobs import services

    org = funded_org("bench-live", name="Bench live")
    user = User.objects.create(username="bench-live", email="bench-live@example.com")
    user.set_password(PASSWORD)
    user.save()
    Membership.objects.create(user=user, organization=org, role=Role.MEMBER)

    def job(name: str):
        payload = {
            "name": name,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
            "container": {"image": "python:3.11-slim", "command": ["python", "train.py"]},
        }
        return services.job_create(organization=org, payload=payload, idempotency_key=None).job

    return org, user, {name: job(name) for name in ("live", "empty", "window", "big")}


def fill_job(job, *, events: int, log_lines: int, metrics: int) -> None:
    """Events, log lines (a tenth of them system lines) and metric points, as the services
    would have stored them over a long run, with the counters to match."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_jobevent (job_id, attempt, type, message, data, created_at) "
            "SELECT %s, 1, 'heartbeat', 'runner event ' || g, '{}'::jsonb, "
            "now() - interval '3 hours' + (g || ' seconds')::interval "
            "FROM generate_series(1, %s) AS g",
            [job.id, events],
        )
        cursor.execute(
            "INSERT INTO jobs_logline (job_id, attempt, source, stream, timestamp, message) "
            "SELECT %s, 1, CASE WHEN g %% 10 = 0 THEN 'system' ELSE 'user' END, 'stdout', "
            "now() - interval '3 hours' + (g * 100 || ' milliseconds')::interval, "
            "'step ' || g || ' loss 0.' || g FROM generate_series(1, %s) AS g",
            [job.id, log_lines],
        )
        cursor.execute(
            "INSERT INTO jobs_metricpoint "
            "(job_id, attempt, step, loss, epoch, learning_rate, extra, created_at) "
            "SELECT %s, 1, g * 10, 2.5 / (1 + g / 100.0), g / 400.0, 2e-4, '{}'::jsonb, "
            "now() - interval '3 hours' + (g * 5 || ' seconds')::interval "
            "FROM generate_series(1, %s) AS g",
            [job.id, metrics],
        )
        cursor.execute(
            "UPDATE jobs_job SET user_log_lines = %s, system_log_lines = %s WHERE id = %s",
            [log_lines - log_lines // 10, log_lines // 10, job.id],
        )
        for table in ("jobs_jobevent", "jobs_logline", "jobs_metricpoint"):
            cursor.execute(f"ANALYZE {table}")


def redis_round_trip_ms() -> list[float]:
    """Publish with one client; a second, subscribed in a thread, receives: the bare hop
    every push takes (the channel layer adds its own work on both sides)."""
    import redis

    channel = "bench-live:rtt"
    publisher = redis.Redis.from_url(REDIS_URL)
    pubsub = redis.Redis.from_url(REDIS_URL).pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    received: queue.Queue[float] = queue.Queue()

    def listen() -> None:
        for message in pubsub.listen():
            if message["type"] == "message":
                if message["data"] == b"stop":
                    return
                received.put(time.perf_counter())

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    samples = []
    try:
        for i in range(RTT_SAMPLES + 5):
            start = time.perf_counter()
            publisher.publish(channel, str(i))
            samples.append((received.get(timeout=5) - start) * 1000)
    finally:
        publisher.publish(channel, "stop")
        thread.join(timeout=5)
        pubsub.close()
        publisher.close()
    return samples[5:]  # the first open connections


def commit_event(job, i: int) -> tuple[int, float, float]:
    """One event, committed and pushed: (its id, wall ms at commit, wall ms once the push
    after commit returned). Runs in the writer thread."""
    from django.db import transaction

    from apps.jobs import services

    committed = []
    with transaction.atomic():
        # Registered before record_event's push, so it runs first, right after COMMIT.
        transaction.on_commit(lambda: committed.append(time.time() * 1000))
        event = services.record_event(job=job, type="bench", message=f"event {i}")
    return event.id, committed[0], time.time() * 1000


def push_steps_ms(job) -> dict[str, float]:
    """The push after one event's commit, whole and step by step, timed in this process (the
    writer thread), medians. The whole push goes to the page with a sequence number it
    already holds, so the page drops it; the group_send steps go to a group of one channel
    nobody reads, the same Redis work as the page's group (62 messages: a channel holds
    100)."""
    import asyncio

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from apps.jobs.live import partials, push
    from apps.jobs.models import JobEvent

    layer = get_channel_layer()
    group, lone = "job.bench-profile", "bench-profile.nobody"
    async_to_sync(layer.group_add)(group, lone)
    event_ids = [JobEvent.objects.filter(job=job).latest("id").id]
    message = {"type": "job.push", "seq": 1, "html": ""}

    def whole():
        push._push(
            job_pk=job.pk,
            groups=(push.job_group(job.public_id), push.project_group("none")),
            seq=1,
            event_ids=event_ids,
            log_ids=[],
            metric_ids=[],
            state_changed=False,
        )

    def render():
        message["html"] = partials.render_push(
            partials.job_for_push(job.pk),
            seq=1,
            event_ids=event_ids,
            log_ids=[],
            metric_ids=[],
            state_changed=False,
        )

    async def nothing():
        pass

    def timed(step) -> float:
        samples = []
        for _ in range(PROFILE_SAMPLES + 1):
            start = time.perf_counter()
            step()
            samples.append((time.perf_counter() - start) * 1000)
        return median(samples[1:])

    async def sends_in_one_loop() -> float:
        samples = []
        for _ in range(PROFILE_SAMPLES + 1):
            start = time.perf_counter()
            await layer.group_send(group, message)
            samples.append((time.perf_counter() - start) * 1000)
        return median(samples[1:])

    render()
    result = {
        "whole push": timed(whole),
        "watchers GET": timed(lambda: push.watched(group)),
        "job_for_push": timed(lambda: partials.job_for_push(job.pk)),
        "render_push": timed(render),
        "async_to_sync(group_send)": timed(lambda: async_to_sync(layer.group_send)(group, message)),
        "of which async_to_sync(no-op)": timed(lambda: async_to_sync(nothing)()),
        "group_send in a running loop": asyncio.run(sends_in_one_loop()),
    }
    result["render_push"] -= result["job_for_push"]  # render() loads the job too
    async_to_sync(layer.group_discard)(group, lone)  # its messages expire in a minute
    return result


def clock_offset_ms(page) -> float:
    """The page's clock minus this process's, median of 20 (each sample ± half a round trip
    of page.evaluate): the two should agree, as they read the same wall clock."""
    offsets = []
    for _ in range(20):
        before = time.time() * 1000
        there = page.evaluate("performance.timeOrigin + performance.now()")
        after = time.time() * 1000
        offsets.append(there - (before + after) / 2)
    return median(offsets)


def sign_in(browser, base_url: str, user):
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/projects/")
    return context, page


def event_to_screen(page, writer: ThreadPoolExecutor, path: str, job) -> dict[str, list]:
    """Events through the page, one at a time: ms from commit to the row in the DOM, and
    each phase's ms. The first event is a warm-up."""
    page.goto(path)
    page.locator("#live-indicator.on").wait_for(timeout=10_000)
    page.evaluate(WATCH_JS)
    rows = []
    for i in range(EVENTS + 1):
        # ORM work stays off this thread: Playwright's event loop lives here, and under a
        # running loop async_to_sync in the push would refuse to run (the push is lost).
        event_id, committed, pushed = writer.submit(commit_event, job, i).result()
        dom_id = f"evt-{event_id}"
        handle = page.wait_for_function(MARKS_JS, arg=dom_id, timeout=10_000)
        message, dom, frame = handle.json_value()
        assert page.locator(f"#{dom_id}").inner_text().count(f"event {i}") == 1
        rows.append((committed, pushed, message, dom, frame))
    rows = rows[1:]
    assert all(message is not None for _, _, message, _, _ in rows), "a row came by catch-up"
    return {
        "screen": [dom - committed for committed, _, _, dom, _ in rows],
        "commit → push sent": [pushed - committed for committed, pushed, _, _, _ in rows],
        "→ socket message in the page": [message - pushed for _, pushed, message, _, _ in rows],
        "→ row in the DOM": [dom - message for _, _, message, dom, _ in rows],
        "→ next frame": [frame - dom for _, _, _, dom, frame in rows],
    }


def page_loads(page, session, base_url: str, paths: dict[str, str]) -> dict[str, dict]:
    """Chromium loads (Navigation Timing, ms from the start: response end, DOMContentLoaded
    end, load end) and HTML-only GETs of each path, the paths taking turns."""
    keys = ("response", "dcl", "load", "html")
    results = {name: {key: [] for key in keys} for name in paths}
    for round_ in range(LOADS + 1):
        for name, path in paths.items():
            page.goto(path, wait_until="load")
            timings = page.wait_for_function(NAV_JS).json_value()
            start = time.perf_counter()
            html = session.get(f"{base_url}{path}", timeout=30)
            html_ms = (time.perf_counter() - start) * 1000
            assert html.status_code == 200 and 'id="events-body"' in html.text, html.status_code
            if round_ == 0:
                continue  # warm-up: templates, static files, connections
            for key, value in zip(keys, [*timings, html_ms], strict=True):
                results[name][key].append(value)
    return results


def print_results(rtt, offset, screen, steps, loads, shown) -> None:
    rtt_ms, total = median(rtt), screen.pop("screen")
    print(
        f"event to screen ({EVENTS} events): commit → row in the DOM median "
        f"{median(total):.1f} ms, p90 {p90(total):.1f} ms (min {min(total):.1f}, max "
        f"{max(total):.1f}); Redis publish → subscriber median {rtt_ms:.3f} ms "
        f"(p90 {p90(rtt):.3f}); ratio {median(total) / rtt_ms:.0f}"
    )
    print(
        "  phases, median (p90) ms: "
        + "; ".join(f"{name} {median(v):.1f} ({p90(v):.1f})" for name, v in screen.items())
        + f"; page clock minus this process's {offset:+.2f}"
    )
    print(
        "  the push after commit, in-process, median ms: "
        + "; ".join(f"{name} {ms:.2f}" for name, ms in steps.items())
    )
    ok = True
    for key, label in (("load", "Chromium load"), ("html", "HTML alone")):
        empty, window, big = (median(loads[name][key]) for name in ("empty", "window", "big"))
        ok = ok and big / empty <= TARGET
        print(
            f"{label} ({LOADS} each): empty job {empty:.1f} ms; {BIG_EVENTS:,} events + "
            f"{BIG_LOG_LINES:,} log lines + {BIG_METRICS:,} points {big:.1f} ms, ratio "
            f"{big / empty:.2f} (target <= {TARGET}); a job that just fills the page "
            f"{window:.1f} ms, big/that {big / window:.2f}"
        )
    print(
        "  medians, empty / full page / big, ms: "
        + "; ".join(
            f"{key} "
            + " / ".join(f"{median(loads[name][key]):.1f}" for name in ("empty", "window", "big"))
            for key in ("response", "dcl")
        )
        + f"; the big page shows {shown}"
    )
    print("within targets" if ok else "OUTSIDE TARGETS")


def main() -> int:
    if not Path(CHROMIUM).exists():
        print("Chromium is not installed: `apt-get install chromium`.", file=sys.stderr)
        return 1
    recreate_database()
    setup_django()
    import requests
    from playwright.sync_api import sync_playwright

    from apps.jobs.live import partials
    from tests.integration.stack import Stack

    org, user, jobs = make_team()
    fill_job(jobs["big"], events=BIG_EVENTS, log_lines=BIG_LOG_LINES, metrics=BIG_METRICS)
    # As much as the page shows, no more: the windows and the chart's cap.
    fill_job(
        jobs["window"],
        events=partials.WINDOW,
        log_lines=partials.WINDOW,
        metrics=partials.CHART_MAX_POINTS,
    )
    paths = {name: f"/o/{org.slug}/jobs/{jobs[name].public_id}/" for name in jobs}

    with tempfile.TemporaryDirectory(prefix="bench-live-") as workdir:
        # The web server alone: no worker, so nothing but this script writes the jobs.
        stack = Stack(database_url=DATABASE_URL, redis_url=REDIS_URL, workdir=Path(workdir))
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-writer")
        try:
            stack.start_web()
            rtt = redis_round_trip_ms()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    context, page = sign_in(browser, stack.url, user)
                    offset = clock_offset_ms(page)
                    screen = event_to_screen(page, writer, paths["live"], jobs["live"])
                    steps = writer.submit(push_steps_ms, jobs["live"]).result()
                    session = requests.Session()
                    for cookie in context.cookies():
                        session.cookies.set(cookie["name"], cookie["value"])
                    loads = page_loads(
                        page, session, stack.url, {k: paths[k] for k in ("empty", "window", "big")}
                    )
                    page.goto(paths["big"], wait_until="load")
                    assert page.locator("#log-older").count() == 1  # older lines on demand
                    shown = (
                        f"{page.locator('#events-body .grid-row').count()} table rows and "
                        f"{page.locator('#log-lines .log-line').count()} log lines"
                    )
                finally:
                    browser.close()
        except Exception:
            print(stack.logs(), file=sys.stderr)
            raise
        finally:
            stack.stop()
            writer.submit(_close_connection).result()
            writer.shutdown()
    print_results(rtt, offset, screen, steps, loads, shown)
    return 0


def _close_connection() -> None:
    from django.db import connection

    connection.close()


if __name__ == "__main__":
    sys.exit(main())
