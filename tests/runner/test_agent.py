"""The runner end to end: `python -m runner` as a real process group, against a real HTTP
server speaking the runner protocol (tests/runner/peer.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.runner.peer import ControlPlane

REPO = Path(__file__).resolve().parents[2]
# The runner must run on any python3 >= 3.9: RUNNER_PYTHON=/path/to/python3.9 checks that.
RUNNER_PYTHON = os.environ.get("RUNNER_PYTHON") or sys.executable
# A job id of this process's own: a runner kills whatever carries its job id and attempt
# when its workload ends, so two xdist workers' runners must never share them.
JOB = f"job_runnertest{os.getpid()}"
TOKEN = "runner-token-5f2a9c"
SECRET = "hf_resolvedSecretValue"
GRACE_S = 2.0


def spec(**overrides) -> dict:
    base = {
        "job_id": JOB,
        "attempt": 1,
        "command": None,
        "script_b64": None,
        "env": {
            "USER_VAR": "x",
            "HF_TOKEN": SECRET,
            "TRAINYARD_JOB_ID": JOB,
            "TRAINYARD_ATTEMPT": "1",
            "TRAINYARD_CHECKPOINT_DIR": "checkpoints",
            "TRAINYARD_RESUME_FROM": "",
        },
        "mask": [SECRET],
        "heartbeat_interval_s": 0.2,
        "log_batch_max_lines": 1000,
        "log_batch_max_interval_s": 0.05,
        "terminate_grace_s": GRACE_S,
        "final_flush_timeout_s": 20,
    }
    base.update(overrides)
    return base


def script(text: str) -> str:
    return base64.b64encode(textwrap.dedent(text).encode()).decode()


def live_group_members(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (PID 1 here does not reap orphans)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            alive.append(int(entry))
    return alive


@pytest.fixture
def plane():
    control = ControlPlane(job_id=JOB, token=TOKEN, spec=spec())
    control.server.start()
    yield control
    control.server.stop()


@pytest.fixture
def launch(tmp_path):
    started: list[subprocess.Popen] = []

    def start(
        control: ControlPlane, workdir: Path | None = None, token: str = TOKEN, **env_overrides
    ) -> subprocess.Popen:
        workdir = workdir or tmp_path / "attempt"
        env = dict(os.environ)
        env.update(
            TRAINYARD_CONTROL_URL=control.url,
            TRAINYARD_JOB_ID=JOB,
            TRAINYARD_RUNNER_TOKEN=token,
            TRAINYARD_WORKDIR=str(workdir),
        )
        for key, value in env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        log = open(tmp_path / f"runner-{len(started)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [RUNNER_PYTHON, "-m", "runner"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _runner_log(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("runner-*.log")))


def assert_complete(control: ControlPlane) -> list[dict]:
    """Every line arrived once, seq 1..N without gaps, and exit carried N."""
    lines = [line for _, line in sorted(control.lines.items())]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert set(control.receipts.values()) == {1}
    assert len(control.exits) == 1
    assert control.exits[0]["last_seq"] == len(lines)
    return lines


def test_a_command_job_reports_every_line_and_its_exit_code(plane, launch, tmp_path):
    plane.spec = spec(
        command=[
            "sh",
            "-c",
            "echo out one; echo err one >&2; env; echo HF_TOKEN is $HF_TOKEN; "
            "echo err two >&2; echo out two; exit 3",
        ]
    )

    runner = launch(plane)

    assert runner.wait(20) == 0, _runner_log(tmp_path)
    lines = assert_complete(plane)
    assert plane.exits == [{"exit_code": 3, "last_seq": len(lines)}]
    assert len(plane.started) == 1 and plane.started[0]["pid"] > 0
    user = [(line["stream"], line["message"]) for line in lines if line["source"] == "user"]
    assert [m for s, m in user if s == "stderr"] == ["err one", "err two"]
    stdout = [m for s, m in user if s == "stdout"]
    assert stdout[0] == "out one" and stdout[-2:] == ["HF_TOKEN is ***", "out two"]
    assert f"TRAINYARD_JOB_ID={JOB}" in stdout and "USER_VAR=x" in stdout
    for hidden in ("TRAINYARD_RUNNER_TOKEN=", "TRAINYARD_CONTROL_URL=", "TRAINYARD_WORKDIR="):
        assert not any(m.startswith(hidden) for m in stdout)
    assert not any(TOKEN in line["message"] or SECRET in line["message"] for line in lines)
    system = [line["message"] for line in lines if line["source"] == "system"]
    assert system[0] == "fetched spec"
    assert system[1].startswith("starting workload: sh -c ")
    assert lines[-1]["message"] == "workload exited with code 3"
    assert lines[-1]["source"] == "system"
    workdir = tmp_path / "attempt"
    assert json.loads((workdir / "exit.json").read_text())["exit_code"] == 3
    assert (workdir / "spool.acked").read_text().strip() == str(len(lines))
    assert (workdir / "runner.pid").read_text().strip() == str(runner.pid)
    assert (workdir / "work" / "checkpoints").is_dir()


# The workload looks for the token everywhere it was once handed over. It knows the token
# only as hex, so its own command line (spooled in `starting workload: ...`) does not hold it.
LOOK_FOR_THE_TOKEN = """
import os, pathlib, sys
token = bytes.fromhex(sys.argv[1])
try:
    environ = open(f"/proc/{os.getppid()}/environ", "rb").read()
    print("runner environ read:", b"TRAINYARD_JOB_ID=" in environ, "token:", token in environ)
except OSError:
    print("runner environ unreadable")
workdir = pathlib.Path.cwd().parent
hits = [str(p) for p in workdir.rglob("*") if p.is_file() and token in p.read_bytes()]
print("files holding the token:", hits)
print("own environ holds a token:", any("RUNNER_TOKEN" in name for name in os.environ))
"""


def test_the_token_comes_from_a_file_that_is_gone_before_the_workload_starts(
    plane, launch, tmp_path
):
    workdir = tmp_path / "attempt"
    workdir.mkdir()
    token_file = workdir / "runner.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    plane.spec = spec(command=[sys.executable, "-c", LOOK_FOR_THE_TOKEN, TOKEN.encode().hex()])

    runner = launch(plane, TRAINYARD_RUNNER_TOKEN=None, TRAINYARD_RUNNER_TOKEN_FILE=str(token_file))

    assert runner.wait(20) == 0, _runner_log(tmp_path)  # it authenticated with the file's token
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 0
    assert plane.messages("user") == [
        # Root reads a non-dumpable process's environment; any other user cannot.
        "runner environ read: True token: False"
        if os.geteuid() == 0
        else "runner environ unreadable",
        "files holding the token: []",
        "own environ holds a token: False",
    ]
    assert not token_file.exists()


def test_a_script_job_runs_in_the_work_directory(plane, launch, tmp_path):
    plane.spec = spec(
        script_b64=script(
            """
            echo "from the script"
            pwd
            echo "checkpoints in $TRAINYARD_CHECKPOINT_DIR"
            """
        )
    )

    runner = launch(plane)

    assert runner.wait(20) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    workdir = tmp_path / "attempt"
    assert plane.messages("user") == [
        "from the script",
        str(workdir / "work"),
        "checkpoints in checkpoints",
    ]
    assert plane.exits[0]["exit_code"] == 0
    assert (workdir / "script.sh").read_text().startswith('\necho "from the script"')
    assert plane.messages("system")[1] == f"starting workload: bash {workdir / 'script.sh'}"


def test_a_terminate_order_stops_the_whole_group_and_reports_143(plane, launch, tmp_path):
    plane.spec = spec(command=["sleep", "600"])
    runner = launch(plane)
    plane.wait_for(lambda: plane.started)

    plane.orders.append("terminate")
    ordered = time.monotonic()

    assert runner.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert time.monotonic() - ordered < GRACE_S + 3
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 143
    assert live_group_members(runner.pid) == []
    assert "terminating: sending SIGTERM to the workload" in plane.messages("system")


TICKING = [
    sys.executable,
    "-c",
    "import time\nfor i in range(60):\n    print(i, flush=True)\n    time.sleep(0.03)",
]


@pytest.mark.parametrize(
    ("batch_order", "most", "least"),
    [
        pytest.param("continue", 2, 0, id="answers-with-an-order"),
        pytest.param(None, 100, 5, id="an-older-control-plane"),
    ],
)
def test_batches_answered_with_an_order_stand_in_for_heartbeats(
    plane, launch, tmp_path, batch_order, most, least
):
    # A line every 30 ms for about two seconds, a batch every 50 ms, heartbeats due every
    # 200 ms: about ten heartbeats, unless the batches' answers count as heartbeats.
    plane.spec = spec(command=TICKING)
    plane.batch_order = batch_order

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert len(assert_complete(plane)) > 60
    assert least <= len(plane.heartbeats) <= most


def test_a_terminate_in_a_batchs_answer_stops_the_workload(plane, launch, tmp_path):
    plane.spec = spec(
        command=[
            sys.executable,
            "-c",
            "import time\nwhile True: print('busy', flush=True); time.sleep(0.05)",
        ],
        heartbeat_interval_s=60,  # no heartbeat would come in time: only a batch's answer
    )
    plane.batch_order = "continue"
    runner = launch(plane)
    plane.wait_for(lambda: len(plane.messages("user")) >= 5)

    plane.batch_order = "terminate"

    assert runner.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 143
    assert plane.heartbeats == []
    assert "terminating: sending SIGTERM to the workload" in plane.messages("system")


def test_a_workload_that_ignores_sigterm_is_killed_after_the_grace(plane, launch, tmp_path):
    plane.spec = spec(
        command=[
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)",
        ]
    )
    runner = launch(plane)
    plane.wait_for(lambda: "ready" in plane.messages("user"))

    plane.orders.append("terminate")
    ordered = time.monotonic()

    assert runner.wait(GRACE_S + 8) == 0, _runner_log(tmp_path)
    assert GRACE_S <= time.monotonic() - ordered < GRACE_S + 3
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 137
    assert live_group_members(runner.pid) == []


def test_sigterm_to_the_runner_alone_is_handled_like_terminate(plane, launch, tmp_path):
    plane.spec = spec(command=["sleep", "600"])
    runner = launch(plane)
    plane.wait_for(lambda: plane.started)

    os.kill(runner.pid, signal.SIGTERM)

    assert runner.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 143
    assert live_group_members(runner.pid) == []


def test_checkpoint_and_exit_sends_sigusr1_that_a_bash_workload_can_trap(plane, launch, tmp_path):
    plane.spec = spec(
        script_b64=script(
            """
            trap 'echo "checkpoint saved"; exit 7' USR1
            echo ready
            while true; do sleep 0.1; done
            """
        )
    )
    runner = launch(plane)
    plane.wait_for(lambda: "ready" in plane.messages("user"))

    plane.orders.append("checkpoint_and_exit")

    assert runner.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    # bash may also say on stderr that SIGUSR1 ended its `sleep` ("User defined signal 1").
    stdout = [
        line["message"]
        for _, line in sorted(plane.lines.items())
        if line["source"] == "user" and line["stream"] == "stdout"
    ]
    assert stdout == ["ready", "checkpoint saved"]
    assert plane.exits[0]["exit_code"] == 7


def test_no_line_is_lost_or_repeated_while_the_control_plane_is_away(plane, launch, tmp_path):
    plane.spec = spec(
        command=[
            sys.executable,
            "-c",
            "import time\nfor i in range(400):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.01)",
        ]
    )
    runner = launch(plane)
    plane.wait_for(lambda: len(plane.messages("user")) >= 5)

    plane.server.stop()
    time.sleep(3)
    plane.server.start()

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.messages("user") == [f"line {i}" for i in range(400)]
    assert plane.exits[0]["exit_code"] == 0


def test_a_second_runner_on_the_same_workdir_exits_75(plane, launch, tmp_path):
    plane.spec = spec(command=["sleep", "600"])
    first = launch(plane)
    plane.wait_for(lambda: plane.started)

    second = launch(plane)

    assert second.wait(10) == 75
    assert plane.spec_fetches == 1
    assert len(plane.started) == 1
    os.killpg(first.pid, signal.SIGTERM)
    assert first.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert plane.exits[0]["exit_code"] == 143


def test_a_refused_token_exits_1_without_starting_the_workload(plane, launch, tmp_path):
    plane.spec = spec(command=["sh", "-c", "touch started-anyway"])

    runner = launch(plane, token="wrong-token")

    assert runner.wait(10) == 1
    assert plane.started == [] and plane.exits == []
    assert not (tmp_path / "attempt" / "work" / "started-anyway").exists()


def test_a_superseded_attempt_stops_the_workload_and_exits_0(plane, launch, tmp_path):
    plane.spec = spec(command=["sleep", "600"])
    runner = launch(plane)
    plane.wait_for(lambda: plane.started)

    plane.heartbeat_status = (409, {"error": {"type": "attempt_superseded"}})

    assert runner.wait(GRACE_S + 5) == 0, _runner_log(tmp_path)
    assert plane.exits == []
    assert live_group_members(runner.pid) == []
    assert json.loads((tmp_path / "attempt" / "exit.json").read_text())["exit_code"] == 143


def test_a_missing_variable_exits_2(plane, launch, tmp_path):
    runner = launch(plane, TRAINYARD_WORKDIR=None)

    assert runner.wait(10) == 2
    assert "TRAINYARD_WORKDIR" in _runner_log(tmp_path)
    assert plane.spec_fetches == 0


def test_a_control_plane_away_at_the_end_gives_up_after_final_flush_timeout(
    plane, launch, tmp_path
):
    plane.spec = spec(
        command=["sh", "-c", "echo hello; sleep 0.5; echo bye; exit 4"], final_flush_timeout_s=1
    )
    runner = launch(plane)
    plane.wait_for(lambda: "hello" in plane.messages("user"))

    plane.server.stop()

    assert runner.wait(15) == 69, _runner_log(tmp_path)
    assert json.loads((tmp_path / "attempt" / "exit.json").read_text())["exit_code"] == 4
    assert plane.exits == []
    spooled = (tmp_path / "attempt" / "spool.jsonl").read_text()
    assert '"message":"bye"' in spooled and "workload exited with code 4" in spooled


def test_batches_of_long_lines_stay_under_a_megabyte(plane, launch, tmp_path):
    plane.spec = spec(
        command=[sys.executable, "-c", "for i in range(120):\n    print(chr(65 + i % 26) * 20000)"]
    )

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    letters = [chr(65 + i % 26) for i in range(120)]
    assert plane.messages("user") == [
        part for c in letters for part in (c * 16384, c * (20000 - 16384))
    ]
    assert max(plane.batch_bytes) <= 1_000_000
    assert len(plane.batch_bytes) >= 3  # 2.4 MB of lines


def test_a_fast_workload_delivers_100000_lines(plane, launch, tmp_path):
    plane.spec = spec(
        command=[
            sys.executable,
            "-c",
            "import sys\nw = sys.stdout.write\n"
            "for i in range(100000):\n    w(f\"{{'loss': 2.3125, 'step': {i}}}\\n\")",
        ]
    )
    started = time.monotonic()

    runner = launch(plane)

    assert runner.wait(60) == 0, _runner_log(tmp_path)
    elapsed = time.monotonic() - started
    lines = assert_complete(plane)
    user = [line["message"] for line in lines if line["source"] == "user"]
    assert len(user) == 100_000
    assert user[0] == "{'loss': 2.3125, 'step': 0}"
    assert user[-1] == "{'loss': 2.3125, 'step': 99999}"
    assert max(plane.batches) <= 1000
    print(f"runner: 100,000 lines end to end in {elapsed:.1f} s")


def test_a_backlog_keeps_two_batches_in_flight_and_a_failed_one_is_sent_again(
    plane, launch, tmp_path
):
    plane.spec = spec(
        command=[sys.executable, "-c", "for i in range(20000): print(i)"],
        log_batch_max_interval_s=5,  # only full batches go before the workload ends
    )
    plane.log_statuses = [503]  # the first batch fails once

    runner = launch(plane)

    assert runner.wait(60) == 0, _runner_log(tmp_path)
    lines = assert_complete(plane)  # every line once, in seq order
    user = [line["message"] for line in lines if line["source"] == "user"]
    assert user == [str(i) for i in range(20000)]
    # A batch posted while another was in flight names that one's last seq (the line just
    # before its own first): the control plane stores it after that one.
    pairs = [(follows, first) for follows, first in plane.follows if follows is not None]
    assert len(pairs) >= 5
    assert all(follows == first - 1 for follows, first in pairs)
    assert max(plane.batches) <= 1000


def test_batches_go_gzipped_only_when_the_spec_asks_for_it(plane, launch, tmp_path):
    workload = [sys.executable, "-c", "for i in range(20000): print(i)"]
    plane.spec = spec(command=workload, log_gzip_min_bytes=4096)

    runner = launch(plane)

    assert runner.wait(60) == 0, _runner_log(tmp_path)
    lines = assert_complete(plane)
    assert [line["message"] for line in lines if line["source"] == "user"] == [
        str(i) for i in range(20000)
    ]
    # A batch of a thousand lines is some 70 kB of JSON: over the threshold.
    big = [
        enc for enc, size in zip(plane.batch_encodings, plane.batches, strict=True) if size >= 1000
    ]
    assert big and set(big) == {"gzip"}


def test_a_spec_without_a_gzip_threshold_gets_plain_batches(plane, launch, tmp_path):
    plane.spec = spec(command=[sys.executable, "-c", "for i in range(20000): print(i)"])

    runner = launch(plane)

    assert runner.wait(60) == 0, _runner_log(tmp_path)
    assert len(assert_complete(plane)) > 20000
    assert set(plane.batch_encodings) == {None}


def test_sigterm_while_the_spec_cannot_be_fetched_exits_without_starting(plane, launch, tmp_path):
    plane.server.stop()  # connections are refused: the runner keeps retrying the spec
    runner = launch(plane)
    pid_file = tmp_path / "attempt" / "runner.pid"
    plane.wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    time.sleep(0.5)

    os.kill(runner.pid, signal.SIGTERM)

    assert runner.wait(3) == 0, _runner_log(tmp_path)
    assert json.loads((tmp_path / "attempt" / "exit.json").read_text())["exit_code"] == 143
    assert not (tmp_path / "attempt" / "work").exists()


def test_a_command_that_cannot_start_is_reported_as_127(plane, launch, tmp_path):
    plane.spec = spec(command=["/nonexistent/train"])

    runner = launch(plane)

    assert runner.wait(10) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.exits[0]["exit_code"] == 127
    assert plane.started == []
    assert plane.messages("system")[2].startswith("cannot start the workload: ")
