"""Argument parsing, the requests each command sends, error rendering and exit codes."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile

import httpx
import pytest

from apps.finetunes.forms import FinetuneJobForm
from apps.finetunes.payloads import DEFAULT_COMPUTE as FINETUNE_COMPUTE
from apps.jobs.specs import DEFAULT_DISK_GB
from apps.jobs.web.forms import ContainerJobForm
from apps.serving.payloads import DEFAULT_COMPUTE as SERVE_COMPUTE
from tests.cli.conftest import KEY
from trainyard_cli.commands.logs import job_exit_code
from trainyard_cli.main import CONTAINER_DISK_GB, FINETUNE_DISK_GB, split_command

JOBS = "/api/v1/compute/jobs"


def _job(**fields) -> dict:
    job = {
        "id": "job_abc",
        "name": "train",
        "kind": "container",
        "project": "proj_default",
        "state": "requested",
        "reason": None,
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 20},
        "accrued_usd": 0.0,
        "price_usd_hr": None,
        "created_at": "2026-01-02T03:04:05.123456+00:00",
        "started_at": None,
        "terminal_at": None,
        "exit_code": None,
        "attempts": [],
    }
    return job | fields


def _error(kind: str, message: str, param: str | None = None) -> dict:
    return {"error": {"type": kind, "message": message, "param": param}}


def test_the_command_is_everything_after_the_first_double_dash():
    assert split_command(["jobs", "submit", "img", "--gpus", "2", "--", "python", "-m", "x"]) == (
        ["jobs", "submit", "img", "--gpus", "2"],
        ["python", "-m", "x"],
    )
    assert split_command(["jobs", "list"]) == (["jobs", "list"], [])
    assert split_command(["jobs", "submit", "i", "--", "sh", "-c", "a -- b"])[1] == [
        "sh",
        "-c",
        "a -- b",
    ]


def test_submit_sends_the_whole_request_with_an_idempotency_key(cli, api, capsys):
    api.on("POST", JOBS, _job(), status=201)

    code = cli(
        "jobs", "submit", "python:3.12", "--gpus", "2", "--accelerator", "nvidia-a100-80gb",
        "--env", "A=1", "--env", "B=x=y", "--secret", "HF_TOKEN=sec_1:token",
        "--project", "vision", "--max-runtime-hours", "1.5", "--max-cost", "$12.50",
        "--max-price", "2", "--priority", "preemptible", "--name", "run 1",
        "--", "python", "train.py", "--lr", "3e-4",
    )  # fmt: skip

    assert code == 0
    (body,) = api.bodies("POST", JOBS)
    assert body == {
        "name": "run 1",
        # The New Job form's container default.
        "compute": {"accelerator": "nvidia-a100-80gb", "gpu_count": 2, "ephemeral_disk_gb": 10},
        "container": {
            "image": "python:3.12",
            "command": ["python", "train.py", "--lr", "3e-4"],
            "env": {"A": "1", "B": "x=y"},
            "secret_env": {"HF_TOKEN": {"secret_id": "sec_1", "key": "token"}},
        },
        "project": "proj_vision",
        "priority_class": "preemptible",
        "limits": {"max_runtime_hours": 1.5, "max_cost_usd": "12.50", "max_price_usd_hr": "2"},
    }
    post = next(r for r in api.requests if r.method == "POST")
    assert len(post.headers["Idempotency-Key"]) == 32
    printed = capsys.readouterr()
    assert printed.out == "job_abc\n"
    assert "https://trainyard.test/o/acme/jobs/job_abc/" in printed.err


def test_submit_a_script(cli, api, tmp_path):
    api.on("POST", JOBS, _job(), status=201)
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")

    assert cli("jobs", "submit", "local", "--script", str(script), "--json") == 0

    (body,) = api.bodies("POST", JOBS)
    assert base64.b64decode(body["container"]["script_b64"]) == b"echo hi\n"
    assert body["name"] == "train.sh"
    assert "command" not in body["container"]


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "submit", "img"],  # neither command nor script
        ["jobs", "submit", "img", "--env", "=x", "--", "true"],
        ["jobs", "submit", "img", "--secret", "HF_TOKEN=sec_1", "--", "true"],
        ["jobs", "submit", "img", "--max-cost", "lots", "--", "true"],
        ["jobs", "submit", "img", "--gpus", "two", "--", "true"],
        ["jobs", "submit", "img", "--project", "nope", "--", "true"],
        ["logs", "job_1", "--", "true"],
        ["nonsense"],
        [],
    ],
)
def test_usage_errors_exit_2_and_send_no_job(cli, api, capsys, argv):
    assert cli(*argv) == 2
    assert not [r for r in api.requests if r.method == "POST"]
    assert "Error:" in capsys.readouterr().err


def test_a_4xx_shows_the_apis_message_and_param_and_exits_2(cli, api, capsys):
    api.on(
        "POST",
        JOBS,
        _error("invalid_request", "Unknown accelerator 'h100'.", "compute.accelerator"),
        status=400,
    )
    assert cli("jobs", "submit", "img", "--accelerator", "h100", "--", "true") == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "Unknown accelerator 'h100'." in printed.err
    assert "compute.accelerator" in printed.err
    assert "invalid_request" in printed.err


def test_a_5xx_exits_3(cli, api, capsys):
    api.on("GET", JOBS, _error("internal_error", "Something broke."), status=500)
    assert cli("jobs", "list") == 3
    assert "Something broke." in capsys.readouterr().err


def test_an_error_page_that_is_not_json_still_reads_well(cli, api, capsys):
    api.on("GET", JOBS, lambda request: httpx.Response(502, text="<html>Bad gateway</html>"))
    assert cli("jobs", "list") == 3
    err = capsys.readouterr().err
    assert "HTTP 502" in err and "<html>" not in err


def test_no_connection_exits_3_without_showing_the_key(cli, api, capsys):
    def refuse(request):
        raise httpx.ConnectError("Connection refused", request=request)

    api.on("GET", JOBS, refuse)
    assert cli("jobs", "list") == 3
    printed = capsys.readouterr()
    assert "Cannot reach https://trainyard.test" in printed.err
    assert KEY not in printed.err + printed.out


def test_a_dropped_submit_is_sent_again_with_the_same_key(cli, api):
    calls = []

    def flaky(request):
        calls.append(request.headers["Idempotency-Key"])
        if len(calls) == 1:
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(201, json=_job())

    api.on("POST", JOBS, flaky)
    assert cli("jobs", "submit", "img", "--", "true") == 0
    assert len(calls) == 2 and calls[0] == calls[1]


def test_list_json_is_the_apis_page_and_nothing_else(cli, api, capsys):
    page = {"data": [_job()], "next_cursor": "abc", "total": 7}
    api.on("GET", JOBS, page)
    assert cli("jobs", "list", "--json", "--limit", "1") == 0
    assert json.loads(capsys.readouterr().out) == page
    assert api.requests[-1].url.params["limit"] == "1"


def test_list_as_a_table(cli, api, capsys):
    api.on("GET", JOBS, {"data": [_job(accrued_usd=0.25)], "next_cursor": None, "total": 1})
    assert cli("jobs", "list") == 0
    out = capsys.readouterr().out
    for text in ("job_abc", "train", "requested", "$0.25", "2026-01-02 03:04:05"):
        assert text in out


def test_get_and_terminate(cli, api, capsys):
    api.on("GET", f"{JOBS}/job_abc", _job(state="running", latest_metrics={"loss": 1.5}))
    api.on("POST", f"{JOBS}/job_abc/terminate", _job(state="terminating"))
    assert cli("jobs", "get", "job_abc") == 0
    out = capsys.readouterr().out
    assert "running" in out and "metric loss" in out and "/o/acme/jobs/job_abc/" in out
    assert cli("terminate", "job_abc", "--json") == 0
    assert json.loads(capsys.readouterr().out)["state"] == "terminating"


def test_a_job_id_cannot_walk_the_url(cli, api):
    cli("jobs", "get", "../../billing/balance")
    assert api.requests[-1].url.raw_path.decode().startswith(f"{JOBS}/..%2F..%2F")


@pytest.mark.parametrize(
    ("state", "exit_code", "expected"),
    [
        ("succeeded", 0, 0),
        ("failed", 3, 3),
        ("failed", 300, 44),  # as a process's exit status: modulo 256
        ("failed", 256, 1),  # ...but never 0 for a failure
        ("failed", -9, 137),  # killed by a signal
        ("failed", None, 1),  # no_capacity and the like
        ("terminated", None, 1),
        ("terminated", 143, 1),
    ],
)
def test_the_exit_code_of_a_job(state, exit_code, expected):
    assert job_exit_code({"state": state, "exit_code": exit_code}) == expected


def test_logs_follow_prints_each_line_once_and_exits_with_the_jobs_code(cli, api, capsys):
    lines = [
        {"id": "log_1", "source": "user", "stream": "stdout", "message": "one", "attempt": 1},
        {"id": "log_2", "source": "system", "stream": "stdout", "message": "boot", "attempt": 1},
        {"id": "log_3", "source": "user", "stream": "stdout", "message": "two", "attempt": 1},
        {"id": "log_4", "source": "user", "stream": "stderr", "message": "oops", "attempt": 1},
    ]
    states = iter(["running", "running", "failed"])
    visible = iter([1, 3, 4])
    shown = {"count": 0}

    def job(request):
        state = next(states)
        shown["count"] = next(visible)
        exit_code = 3 if state == "failed" else None
        return httpx.Response(200, json=_job(state=state, exit_code=exit_code))

    def logs(request):  # one page of 2 lines, cursor after it: "c2"
        cursor = request.url.params.get("cursor")
        available = lines[: shown["count"]]
        if cursor is None:
            page, next_cursor = available[:2], ("c2" if len(available) > 2 else None)
        else:
            page, next_cursor = available[2:], None
        return httpx.Response(200, json={"data": page, "next_cursor": next_cursor, "total": 0})

    api.on("GET", f"{JOBS}/job_abc", job)
    api.on("GET", f"{JOBS}/job_abc/logs", logs)

    assert cli("logs", "job_abc", "-f", "--interval", "0") == 3

    printed = capsys.readouterr()
    assert printed.out == "one\ntwo\n"
    assert "[trainyard] boot" in printed.err and "oops" in printed.err
    assert "failed, exit code 3" in printed.err
    # It catches up in the API's largest pages, then follows in small ones.
    limits = [r.url.params["limit"] for r in api.requests if r.url.path.endswith("/logs")]
    assert limits[0] == "10000" and set(limits[1:]) == {"500"}


def test_logs_without_follow_json(cli, api, capsys):
    line = {"id": "log_1", "source": "user", "stream": "stdout", "message": "hi", "attempt": 1}
    api.on("GET", f"{JOBS}/job_abc/logs", {"data": [line], "next_cursor": None, "total": 1})
    assert cli("logs", "job_abc", "--json", "--source", "user") == 0
    assert json.loads(capsys.readouterr().out)["data"] == [line]
    assert api.requests[-1].url.params["source"] == "user"
    assert api.requests[-1].url.params["limit"] == "10000"


def test_metrics_table_and_series(cli, api, capsys):
    latest = {"step": 40, "value": 1.25, "time": "2026-01-02T03:04:05+00:00"}
    point = {"name": "loss", "step": 40, "value": 1.25, "time": latest["time"], "attempt": 1}
    page = {"names": [{"name": "loss", "latest": latest}], "data": [point]}
    api.on("GET", f"{JOBS}/job_abc/metrics", page | {"next_cursor": None, "total": 1})
    assert cli("metrics", "job_abc") == 0
    assert "loss" in capsys.readouterr().out
    assert cli("metrics", "job_abc", "--name", "loss", "--json") == 0
    assert json.loads(capsys.readouterr().out)["data"] == [point]
    assert api.requests[-1].url.params["name"] == "loss"


def _artifact(api, body: bytes, digest: str):
    api.on(
        "GET",
        f"{JOBS}/job_abc/artifacts/art_1/download",
        lambda request: httpx.Response(
            200,
            content=body,
            headers={
                "X-Trainyard-SHA256": digest,
                "Content-Disposition": 'attachment; filename="../../evil.tar.gz"',
            },
        ),
    )


def test_artifacts_download_checks_the_digest(cli, api, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    body = b"archive bytes" * 1000
    _artifact(api, body, hashlib.sha256(body).hexdigest())

    assert cli("artifacts", "download", "job_abc", "art_1") == 0

    assert (tmp_path / "evil.tar.gz").read_bytes() == body  # the name only, never a path
    assert "verified" in capsys.readouterr().err


def test_a_corrupted_download_leaves_no_file_and_exits_3(cli, api, tmp_path, capsys):
    _artifact(api, b"tampered", "0" * 64)
    target = tmp_path / "out.tar.gz"

    assert cli("artifacts", "download", "job_abc", "art_1", "-o", str(target)) == 3

    assert list(tmp_path.iterdir()) == []
    assert "sha256" in capsys.readouterr().err


def test_usage_json_and_csv(cli, api, capsys):
    page = {
        "window": {"from": "2026-01-01T00:00:00+00:00", "to": "2026-01-31T00:00:00+00:00"},
        "summary": {"total_usd": 0.5, "job_usd": 0.5, "service_usd": 0.0},
        "data": [],
        "next_cursor": None,
        "total": 0,
    }
    api.on("GET", "/api/v1/compute/usage", page)
    api.on("GET", "/api/v1/compute/usage.csv", lambda r: httpx.Response(200, text="a,b\n1,2\n"))
    assert cli("usage", "--json", "--from", "2026-01-01", "--to", "2026-01-31") == 0
    assert json.loads(capsys.readouterr().out) == page
    assert api.requests[-1].url.params["from"] == "2026-01-01"
    assert cli("usage", "--csv") == 0
    assert capsys.readouterr().out == "a,b\n1,2\n"


def test_datasets_upload_sends_the_raw_file(cli, api, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello"}\n')
    dataset = {"id": "ds_1", "name": "train", "format": "text", "rows": 1, "sha256": "x"}
    api.on("POST", "/api/v1/projects/proj_vision/datasets", dataset, status=201)

    assert cli("datasets", "upload", "vision", str(data), "--format", "text") == 0

    post = api.requests[-1]
    assert post.content == data.read_bytes()
    assert post.headers["Content-Type"] == "application/x-ndjson"
    assert dict(post.url.params) == {"name": "train", "format": "text", "filename": "train.jsonl"}
    assert capsys.readouterr().out == "ds_1\n"


def test_finetune_with_a_dataset_file_uploads_it_first(cli, api, tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "a", "completion": "b"}\n')
    api.on("POST", "/api/v1/projects/proj_vision/datasets", {"id": "ds_9", "rows": 1}, 201)
    api.on("POST", "/api/v1/projects/proj_vision/finetunes", _job(kind="finetune"), 201)

    code = cli(
        "finetune", "--project", "vision", "--model", "tiny", "--dataset-file", str(data),
        "--format", "prompt_completion", "--max-steps", "5", "--learning-rate", "0.001",
    )  # fmt: skip

    assert code == 0
    (body,) = api.bodies("POST", "/api/v1/projects/proj_vision/finetunes")
    assert body == {
        "name": "finetune tiny",
        "model": "tiny",
        "dataset": "ds_9",
        "dataset_format": "prompt_completion",
        "max_steps": 5,
        "learning_rate": 0.001,
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 20},
    }


def test_submit_with_a_workdir_uploads_the_archive_then_names_it(cli, api, tmp_path):
    (tmp_path / "main.py").write_text("print('hi')\n")
    (tmp_path / ".gitignore").write_text("*.tmp\n")
    (tmp_path / "scratch.tmp").write_text("not shipped")
    api.on("POST", "/api/v1/compute/workdirs", {"id": "wd_1", "size_bytes": 1}, status=201)
    api.on("POST", JOBS, _job(), status=201)
    code = cli("jobs", "submit", "local", "--workdir", str(tmp_path), "--", "python", "main.py")

    assert code == 0

    upload = next(r for r in api.requests if r.url.path == "/api/v1/compute/workdirs")
    assert upload.headers["Content-Type"] == "application/gzip"
    assert int(upload.headers["Content-Length"]) == len(upload.content)
    with tarfile.open(fileobj=io.BytesIO(upload.content), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == [".gitignore", "main.py"]
    (body,) = api.bodies("POST", JOBS)
    assert body["container"]["workdir"] == "wd_1"


def test_logs_follow_waits_out_a_server_that_goes_away(cli, api, capsys, monkeypatch):
    monkeypatch.setattr("trainyard_cli.commands.logs.time.sleep", lambda seconds: None)
    answers = iter(["down", "down", "down", "down", "down", "down", "succeeded"])

    def job(request):
        answer = next(answers)
        if answer == "down":
            raise httpx.ConnectError("Connection refused", request=request)
        return httpx.Response(200, json=_job(state=answer, exit_code=0))

    api.on("GET", f"{JOBS}/job_abc", job)
    api.on("GET", f"{JOBS}/job_abc/logs", {"data": [], "next_cursor": None, "total": 0})

    assert cli("logs", "job_abc", "-f", "--interval", "0") == 0
    assert capsys.readouterr().err.count("Lost the server") == 1


def test_logs_follow_gives_up_on_a_4xx_at_once(cli, api, capsys):
    assert cli("logs", "job_missing", "-f", "--interval", "0") == 2
    assert "Not found." in capsys.readouterr().err


def test_a_local_file_problem_is_one_line_and_exit_1(cli, api, tmp_path, capsys):
    missing = tmp_path / "nowhere" / "out.tar.gz"
    _artifact(api, b"x", hashlib.sha256(b"x").hexdigest())
    assert cli("artifacts", "download", "job_abc", "art_1", "-o", str(missing)) == 1
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err


def test_the_cli_disk_defaults_are_the_servers_one_default_per_kind():
    """One default per kind (apps.jobs.specs.DEFAULT_DISK_GB) across the New Job form, the
    fine-tune and serve payloads and the CLI."""
    assert DEFAULT_DISK_GB == {"container": 10, "finetune": 20, "serve": 20}
    assert (CONTAINER_DISK_GB, ContainerJobForm.default_disk_gb) == (10, 10)
    assert (FINETUNE_DISK_GB, FinetuneJobForm.default_disk_gb) == (20, 20)
    assert FINETUNE_COMPUTE["ephemeral_disk_gb"] == 20
    assert SERVE_COMPUTE["ephemeral_disk_gb"] == 20


def test_count_is_the_accelerator_count_and_gpus_its_old_name(cli, api):
    api.on("POST", JOBS, _job(), status=201)

    assert cli("jobs", "submit", "img", "--count", "1", "--", "true") == 0
    assert cli("jobs", "submit", "img", "--gpus", "2", "--", "true") == 0

    first, second = api.bodies("POST", JOBS)
    assert (first["compute"]["gpu_count"], second["compute"]["gpu_count"]) == (1, 2)
