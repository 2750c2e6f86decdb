"""Jobs run for real: API → Celery dispatch → local backend → runner → workload → ingestion
→ final state, on a real web server, worker and beat, with real processes throughout."""

from __future__ import annotations

import base64
import io
import signal
import tarfile
import time
from urllib.parse import quote, quote_plus

import pytest
from django.db import connection

from apps.jobs.models import Attempt, Job, JobEvent, LogLine
from apps.secrets import services as secret_services
from config.celery import WORKER_APPLICATION_NAME
from runner import procfs
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _messages(job_id: str, **filters) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, **filters)
        .order_by("attempt", "seq", "id")
        .values_list("message", flat=True)
    )


def test_a_successful_command_ends_succeeded_with_its_output(api):
    job = api.submit(command=["bash", "-c", "echo hello; exit 0"])
    done = api.wait_state(job["id"], TERMINAL)
    assert (done["state"], done["exit_code"], done["reason"]) == ("succeeded", 0, None)
    assert [line["message"] for line in api.logs(job["id"], source="user")] == ["hello"]
    system = [line["message"] for line in api.logs(job["id"], source="system")]
    assert any(message.startswith("allocated local: cpu x1") for message in system)
    types = [event["type"] for event in api.events(job["id"])]
    for expected in ("job_created", "provider_allocated", "workload_started", "workload_exited"):
        assert expected in types
    assert [e["data"]["to"] for e in api.events(job["id"]) if e["type"] == "state_changed"] == [
        "allocating",
        "provisioning",
        "running",
        "finalizing",
        "succeeded",
    ]
    assert done["hardware"] == {"accelerator": "cpu", "gpu_count": 1, "gpu_memory_gb": 0}
    assert done["attempts"][0]["exit_code"] == 0
    assert done["attempts"][0]["ended_at"] is not None


def test_a_failing_command_ends_failed_with_its_exit_code(api):
    job = api.submit(command=["bash", "-c", "echo working; echo 'it broke' >&2; exit 3"])
    done = api.wait_state(job["id"], TERMINAL)
    assert (done["state"], done["exit_code"], done["reason"]) == ("failed", 3, "exit_code_3")
    lines = {line["message"]: line["stream"] for line in api.logs(job["id"], source="user")}
    assert lines == {"working": "stdout", "it broke": "stderr"}
    assert Job.objects.get(public_id=job["id"]).error_message == "it broke"


SECRET = "hf_S3cr3t/value+with=chars"

SCRIPT = r"""
set -e
echo "step one"
echo "var=$MY_VAR"
echo "token=$HF_TOKEN"
printf '%s' "$HF_TOKEN" | base64
python -c "import os, urllib.parse as u; print(u.quote(os.environ['HF_TOKEN'], safe=''))"
# The secret in two writes with a pause between them.
python -c "import os, sys, time; t = os.environ['HF_TOKEN']; \
sys.stdout.write('split:' + t[:6]); sys.stdout.flush(); \
time.sleep(0.3); sys.stdout.write(t[6:] + chr(10))"
test "$HF_TOKEN" = 'hf_S3cr3t/value+with=chars' && echo "secret reached the workload"
echo "control plane key: ${SECRET_KEY:-absent}, runner token: ${TRAINYARD_RUNNER_TOKEN:-absent}"
echo "job: $TRAINYARD_JOB_ID attempt $TRAINYARD_ATTEMPT"
echo "step three"
"""


def test_a_script_gets_its_env_and_secret_which_is_never_stored(api, compute_org):
    secret = secret_services.secret_create(
        organization=compute_org, name="hub", data={"HF_TOKEN": SECRET}
    )
    job = api.submit(
        script_b64=base64.b64encode(SCRIPT.encode()).decode(),
        env={"MY_VAR": "hello"},
        secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
    )
    done = api.wait_state(job["id"], TERMINAL)
    assert done["state"] == "succeeded", _messages(job["id"])
    out = _messages(job["id"], source="user")
    assert out[0] == "step one"
    assert "var=hello" in out
    assert "secret reached the workload" in out
    assert "control plane key: absent, runner token: absent" in out
    assert f"job: {job['id']} attempt 1" in out
    assert out[-1] == "step three"
    assert "token=***" in out
    assert "split:***" in out

    forms = [
        SECRET,
        base64.b64encode(SECRET.encode()).decode(),
        quote(SECRET, safe=""),
        quote_plus(SECRET),
    ]
    stored = _messages(job["id"])
    events = list(JobEvent.objects.filter(job__public_id=job["id"]).values_list("message", "data"))
    job_json = str(api.job(job["id"])) + str(Job.objects.filter(public_id=job["id"]).values().get())
    for form in forms:
        assert not any(form in line for line in stored), form
        assert form not in str(events)
        assert form not in job_json


def test_terminate_stops_a_running_job_and_its_process_group(api, stack):
    job = api.submit(command=["bash", "-c", "echo started; sleep 600"])
    api.wait_state(job["id"], "running")
    wait_for(lambda: "started" in _messages(job["id"], source="user"), 20, "output")
    attempt = Attempt.objects.get(job__public_id=job["id"])
    pgid = attempt.handle["pgid"]
    assert procfs.group_members(pgid)

    began = time.monotonic()
    assert api.terminate(job["id"])["state"] == "terminating"
    done = api.wait_state(job["id"], TERMINAL, timeout=30)
    assert (done["state"], done["reason"]) == ("terminated", "cancelled")
    assert time.monotonic() - began < 3 + 10  # the grace period plus a reconcile tick or two
    wait_for(lambda: not procfs.group_members(pgid), 10, "the process group to be gone")


@pytest.mark.parametrize(
    ("limits", "reason"),
    [({"max_runtime_hours": 0.05}, "max_runtime"), ({"max_cost_usd": 0.004}, "max_cost")],
)
def test_a_binding_limit_terminates_the_job(api, limits, reason):
    # The stack counts one wall-clock second as a minute: 0.05 h is 3 s, and $0.004 at
    # $0.10/h is a little over 2 minutes.
    job = api.submit(command=["bash", "-c", "sleep 600"], limits=limits)
    done = api.wait_state(job["id"], TERMINAL, timeout=40)
    assert (done["state"], done["reason"]) == ("terminated", reason)
    if reason == "max_cost":
        assert done["accrued_usd"] >= 0.004


def test_a_job_printing_200000_lines_keeps_every_one_in_order(api):
    job = api.submit(command=["seq", "1", "200000"])
    done = api.wait_state(job["id"], TERMINAL, timeout=240)
    assert done["state"] == "succeeded"
    stored = _messages(job["id"], source="user")
    assert len(stored) == 200000
    assert stored == [str(n) for n in range(1, 200001)]
    first_page = api.session.get(
        f"{api.base}/api/v1/compute/jobs/{job['id']}/logs", params={"source": "user", "limit": 1}
    ).json()
    assert first_page["total"] == 200000
    # The whole log in one streamed, gzipped download through the real ASGI server.
    text = api.session.get(
        f"{api.base}/api/v1/compute/jobs/{job['id']}/logs.txt",
        params={"source": "user"},
        headers={"Accept-Encoding": "gzip"},
        timeout=60,
    )
    assert text.status_code == 200 and text.headers["Content-Encoding"] == "gzip"
    assert text.text == "".join(f"{n}\n" for n in range(1, 200001))  # requests un-gzips it


def test_a_worker_killed_right_after_taking_dispatch_runs_the_job_once(api, stack, tmp_path):
    marker = tmp_path / "runs.txt"
    stack.procs["worker"].stop()
    stack.start_worker(TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S="30")
    try:
        job = api.submit(command=["bash", "-c", f"echo run >> {marker}; echo done"])
        # Dispatch has taken the job once it is allocated. (A second delivery — a reconcile
        # pass that found it `requested` — may already be launching it: safe to run twice.)
        api.wait_state(
            job["id"], {"allocating", "provisioning", "running", "succeeded"}, timeout=60
        )
    finally:
        stack.procs["worker"].stop(signal.SIGKILL)
        stack.start_worker()
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    assert marker.read_text() == "run\n"
    assert len(done["attempts"]) == 1


COUNT_SLOWLY = (
    "import time\nfor i in range(1, {n} + 1):\n    print(i, flush=True)\n    time.sleep({pause})"
)


def test_restarting_web_and_worker_mid_run_loses_nothing(api, stack):
    job = api.submit(command=["python", "-c", COUNT_SLOWLY.format(n=120, pause=0.05)])
    api.wait_state(job["id"], "running")
    stack.procs["web"].stop()
    stack.procs["worker"].stop()
    stack.start_web()
    stack.start_worker()
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded"
    assert _messages(job["id"], source="user") == [str(n) for n in range(1, 121)]


def test_a_web_server_away_for_8_seconds_loses_no_line_and_doubles_none(api, stack):
    job = api.submit(command=["python", "-c", COUNT_SLOWLY.format(n=150, pause=0.1)])
    api.wait_state(job["id"], "running")
    wait_for(lambda: len(_messages(job["id"], source="user")) >= 10, 20, "first lines")
    stack.procs["web"].stop()
    # The outage itself is what this test is about: long enough for the runner's backoff to
    # double five times (0.2 s to 3.2 s) with batches waiting behind the one in flight.
    time.sleep(8)
    stack.start_web()
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    assert _messages(job["id"], source="user") == [str(n) for n in range(1, 151)]


def _drop_stack_connections() -> int:
    """Terminate every PostgreSQL connection to this database but this test's own: the
    web server's, the worker's and beat's, as a database restart would. How many went."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_the_database_dropping_every_connection_mid_ingest_loses_no_line_and_doubles_none(
    api, stack
):
    job = api.submit(command=["python", "-c", COUNT_SLOWLY.format(n=400, pause=0.02)])
    api.wait_state(job["id"], "running")
    dropped = []
    for stored in (50, 150, 250):
        wait_for(lambda s=stored: len(_messages(job["id"], source="user")) >= s, 30, "lines")
        dropped.append(_drop_stack_connections())
    done = api.wait_state(job["id"], TERMINAL, timeout=90)

    assert all(count > 0 for count in dropped)  # the stack's connections did go, each time
    assert done["state"] == "succeeded"
    assert _messages(job["id"], source="user") == [str(n) for n in range(1, 401)]
    assert Job.objects.get(public_id=job["id"]).user_log_lines == 400
    # The body guard looks the key up before Django's request starts: on a connection the
    # database ended since the last upload it opens a new one, never a 500.
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("empty.txt"), io.BytesIO(b""))

    def upload() -> int:
        return api.session.post(
            f"{api.base}/api/v1/compute/workdirs",
            data=archive.getvalue(),
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        ).status_code

    assert upload() == 201
    assert _drop_stack_connections() > 0
    assert [upload(), upload()] == [201, 201]


def _worker_sessions() -> set[tuple]:
    """The worker processes' PostgreSQL sessions now: (backend pid, start time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [WORKER_APPLICATION_NAME],
        )
        return set(cursor.fetchall())


def test_the_worker_keeps_its_database_sessions_from_task_to_task(api):
    """Celery's Django fixup closed each worker process's connection pool after every task,
    so each task opened a new PostgreSQL session; the pool now lives as long as the process,
    as the web process's does (config/celery.py)."""
    first = api.submit(command=["true"])
    api.wait_state(first["id"], TERMINAL)
    before = wait_for(_worker_sessions, timeout=30, what="the worker's database sessions")
    for _ in range(3):  # each is a dispatch, a finalize and a log archive at least
        job = api.submit(command=["true"])
        api.wait_state(job["id"], TERMINAL)
    assert before & _worker_sessions(), "every session the worker had before was closed"
