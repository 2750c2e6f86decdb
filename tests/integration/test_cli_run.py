"""The `trainyard` console script against a real stack: every documented command runs as a
user would run it — the installed script in a subprocess, configured by TRAINYARD_URL and
TRAINYARD_API_KEY (or the file `trainyard login` writes), with a HOME of its own."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from apps.jobs.models import Artifact
from tests.factories import ProjectFactory
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_submit_then_logs_follow_streams_it_and_exits_0(cli, compute_org):
    submitted = cli(
        "jobs", "submit", "local", "--name", "hello", "--disk-gb", "1", "--env", "WHO=cli",
        "--", "sh", "-c", 'echo "hello from $WHO"; echo second line',
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.startswith("job_")
    assert f"{cli.url}/o/{compute_org.slug}/jobs/{job_id}/" in submitted.stderr

    followed = cli("logs", job_id, "-f", timeout=90)

    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == ["hello from cli", "second line"]
    assert "succeeded" in followed.stderr
    assert cli("logs", job_id, "--source", "user").stdout == "hello from cli\nsecond line\n"

    job = cli.json("jobs", "get", job_id)
    assert (job["id"], job["name"], job["state"]) == (job_id, "hello", "succeeded")
    assert job["container"]["env"] == {"WHO": "cli"}
    listed = cli.json("jobs", "list")
    assert job_id in [j["id"] for j in listed["data"]]
    table = cli("jobs", "list")
    assert table.returncode == 0 and job_id in table.stdout and "succeeded" in table.stdout
    page = cli("jobs", "get", job_id)
    assert f"/o/{compute_org.slug}/jobs/{job_id}/" in page.stdout
    lines = cli.json("logs", job_id)["data"]
    assert [line["message"] for line in lines if line["source"] == "user"] == [
        "hello from cli",
        "second line",
    ]


def test_logs_follow_exits_with_a_failed_jobs_exit_code(cli):
    job_id = cli.submit("local", "--disk-gb", "1", "--", "sh", "-c", "echo about to fail; exit 3")

    followed = cli("logs", job_id, "-f", timeout=90)

    assert followed.returncode == 3, followed.stderr
    assert "about to fail" in followed.stdout
    assert cli.json("jobs", "get", job_id)["exit_code"] == 3


def test_terminate_a_running_job(cli):
    job_id = cli.submit("local", "--disk-gb", "1", "--", "sh", "-c", "echo up; sleep 60")
    cli.wait_state(job_id, {"running"})

    result = cli("terminate", job_id)

    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"{job_id}: termina")
    followed = cli("logs", job_id, "-f", timeout=60)
    assert followed.returncode == 1  # terminated: no exit code of its own
    assert cli.json("jobs", "get", job_id)["state"] == "terminated"
    assert cli.json("terminate", job_id)["state"] == "terminated"  # idempotent


def test_api_errors_show_the_message_and_exit_2(cli):
    missing = cli("jobs", "get", "job_nope")
    assert missing.returncode == 2
    assert "not_found" in missing.stderr and missing.stdout == ""
    refused = cli("jobs", "submit", "local", "--accelerator", "h900", "--", "true")
    assert refused.returncode == 2
    assert "compute.accelerator" in refused.stderr


def test_a_server_that_is_not_there_exits_3(cli):
    cli.url = "http://127.0.0.1:9"  # discard: nothing listens
    result = cli("jobs", "list")
    assert result.returncode == 3
    assert "Cannot reach" in result.stderr


def test_usage_json_table_and_csv(cli):
    job_id = cli.submit("local", "--disk-gb", "1", "--", "sh", "-c", "sleep 2; echo done")
    assert cli("logs", job_id, "-f", timeout=90).returncode == 0

    report = cli.json("usage")
    assert set(report) >= {"window", "summary", "data", "next_cursor", "total"}
    billed = {row["resource_id"]: row for row in report["data"]}
    assert billed[job_id]["accrued_usd"] > 0  # a wall-clock second bills as a minute here
    table = cli("usage", "--from", "2000-01-01")
    assert table.returncode == 0 and job_id in table.stdout and "Total:" in table.stdout
    csv = cli("usage", "--csv")
    assert csv.returncode == 0
    assert csv.stdout.splitlines()[0].startswith("resource_type,")
    assert job_id in csv.stdout


def test_login_writes_a_private_config_that_later_commands_use(cli, compute_org):
    bad = cli("login", "--url", cli.url, "--api-key-stdin", stdin="ty_wrong_key\n", with_key=False)
    assert bad.returncode == 2
    assert not (cli.home / ".config").exists()

    result = cli("login", "--url", cli.url, "--api-key-stdin", stdin=cli.key + "\n", with_key=False)

    assert result.returncode == 0, result.stderr
    assert compute_org.slug in result.stderr
    path = cli.home / ".config" / "trainyard" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": cli.url, "api_key": cli.key}
    listed = cli("jobs", "list", "--json", with_key=False)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["total"] == 0


SAVES = r"""
set -e
ck="$PWD/$TRAINYARD_CHECKPOINT_DIR"
mkdir -p "$ck/checkpoint-5"
echo "weights at step five" > "$ck/checkpoint-5/model.bin"
echo '{"type": "checkpoint", "step": 5, "path": "'"$ck"'/checkpoint-5"}'
"""


def test_artifacts_list_and_download_with_the_digest_checked(cli, tmp_path):
    script = tmp_path / "saves.sh"
    script.write_text(SAVES)
    job_id = cli.submit("local", "--disk-gb", "1", "--script", str(script))
    assert cli("logs", job_id, "-f", timeout=90).returncode == 0

    (artifact,) = cli.json("artifacts", "list", job_id)["data"]
    target = tmp_path / "checkpoint.tar.gz"
    result = cli("artifacts", "download", job_id, artifact["id"], "-o", str(target))

    assert result.returncode == 0, result.stderr
    assert "verified" in result.stderr
    assert hashlib.sha256(target.read_bytes()).hexdigest() == artifact["sha256"]
    with tarfile.open(target) as tar:
        assert tar.extractfile("model.bin").read() == b"weights at step five\n"
    default_name = cli("artifacts", "download", job_id, artifact["id"])
    assert default_name.returncode == 0, default_name.stderr
    assert (cli.home / f"{job_id}-attempt1-checkpoint-5.tar.gz").exists()


# -- what needs the endpoints of issue 17 (workdirs, datasets, metrics) ---------------------

MAIN_PY = """\
import hashlib, os, pathlib
data = pathlib.Path("data/corpus.bin").read_bytes()
print("corpus", len(data), hashlib.sha256(data).hexdigest())
print(pathlib.Path("data/notes.txt").read_text().strip())
print("ignored file shipped:", os.path.exists("secret.env"))
print("checkpoint shipped:", os.path.exists("out/model.ckpt"))
from lib.helper import greet
print(greet())
"""


def _project_dir(root: Path) -> tuple[Path, bytes]:
    corpus = os.urandom(1_200_000)  # random: the archive stays about 1.2 MB
    files = {
        "main.py": MAIN_PY.encode(),
        "lib/__init__.py": b"",
        "lib/helper.py": b"def greet():\n    return 'hello from the packed helper'\n",
        "data/corpus.bin": corpus,
        "data/notes.txt": b"notes travel too\n",
        "secret.env": b"TOKEN=do-not-upload\n",
        "out/model.ckpt": b"big weights",
        ".gitignore": b"# never shipped\nsecret.env\nout/\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root, corpus


def test_submit_with_a_workdir_runs_the_packed_code_on_the_local_provider(cli, tmp_path):
    root, corpus = _project_dir(tmp_path / "project")

    submitted = cli(
        "jobs", "submit", "local", "--disk-gb", "1", "--workdir", str(root),
        "--", "python", "main.py",
        timeout=120,
    )  # fmt: skip

    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert "Uploading workdir.tar.gz" in submitted.stderr
    job = cli.json("jobs", "get", job_id)
    assert job["container"]["workdir"].startswith("wd_")
    followed = cli("logs", job_id, "-f", timeout=120)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert followed.stdout.splitlines() == [
        f"corpus {len(corpus)} {hashlib.sha256(corpus).hexdigest()}",
        "notes travel too",
        "ignored file shipped: False",
        "checkpoint shipped: False",
        "hello from the packed helper",
    ]


def test_datasets_upload_and_a_bad_file_names_its_row(cli, compute_org, tmp_path):
    project = ProjectFactory(organization=compute_org, slug="tuning")
    good = tmp_path / "pairs.jsonl"
    good.write_text('{"prompt": "2+2", "completion": "4"}\n{"prompt": "3+3", "completion": "6"}\n')

    dataset = cli.json("datasets", "upload", "tuning", str(good), "--format", "prompt_completion")

    assert dataset["id"].startswith("ds_")
    assert (dataset["name"], dataset["rows"]) == ("pairs", 2)
    assert dataset["project"] == project.public_id
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "2+2", "completion": "4"}\n{"prompt": "3+3"}\n')
    fmt = ("--format", "prompt_completion")
    refused = cli("datasets", "upload", project.public_id, str(bad), *fmt)
    assert refused.returncode == 2
    assert "row 2" in refused.stderr and "completion" in refused.stderr


def test_metrics_of_a_job(cli):
    job_id = cli.submit(
        "local", "--disk-gb", "1", "--",
        "sh", "-c", "echo 'iter 1: loss 2.5000'; echo 'iter 2: loss 2.0000'",
    )  # fmt: skip
    assert cli("logs", job_id, "-f", timeout=90).returncode == 0

    series = cli.json("metrics", job_id, "--name", "loss")
    assert [(p["step"], p["value"]) for p in series["data"]] == [(1, 2.5), (2, 2.0)]
    everything = cli.json("metrics", job_id)
    latest = {n["name"]: n["latest"] for n in everything["names"]}
    assert (latest["loss"]["step"], latest["loss"]["value"]) == (2, 2.0)
    table = cli("metrics", job_id)
    assert table.returncode == 0 and "loss" in table.stdout
    assert cli.json("jobs", "get", job_id)["latest_metrics"]["loss"] == 2.0


def test_a_finetune_from_a_local_dataset_file(cli, compute_org, tiny_model, demo_data):
    ProjectFactory(organization=compute_org, slug="lora")

    started = cli(
        "finetune", "--project", "lora", "--model", str(tiny_model),
        "--dataset-file", str(demo_data["alpaca"]), "--format", "alpaca",
        "--max-steps", "2", "--learning-rate", "0.003", "--disk-gb", "1", "--merge",
        timeout=120,
    )  # fmt: skip

    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    followed = cli("logs", job_id, "-f", timeout=300)
    assert followed.returncode == 0, (followed.stdout + followed.stderr)[-3000:]
    job = cli.json("jobs", "get", job_id)
    assert job["kind"] == "finetune" and job["state"] in TERMINAL
    losses = cli.json("metrics", job_id, "--name", "loss")["data"]
    assert [p["step"] for p in losses] == [1, 2]
    # --merge: the merged weights are one of its artifacts.
    assert Artifact.objects.filter(job__public_id=job_id, kind="merged").exists()


def test_models_push_then_pull_a_folder_through_the_hub(cli, compute_org, tmp_path):
    folder = tmp_path / "adapter"
    (folder / "sub").mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8}')
    (folder / "sub" / "weights.bin").write_bytes(os.urandom(300_000))
    repo = f"{compute_org.slug}/my-adapter"

    pushed = cli("models", "push", str(folder), repo, "-m", "first", "--json")
    assert pushed.returncode == 0, pushed.stderr
    commit = json.loads(pushed.stdout)["commit"]
    (folder / "adapter_config.json").write_text('{"r": 16}')
    assert cli("models", "push", str(folder), repo).returncode == 0

    pulled = cli("models", "pull", repo, str(tmp_path / "old"), "--revision", commit)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "old" / "adapter_config.json").read_text() == '{"r": 8}'
    latest = cli("models", "pull", repo, str(tmp_path / "new"))
    assert latest.returncode == 0, latest.stderr
    assert (tmp_path / "new" / "adapter_config.json").read_text() == '{"r": 16}'
    assert (tmp_path / "new" / "sub" / "weights.bin").read_bytes() == (
        folder / "sub" / "weights.bin"
    ).read_bytes()

    missing = cli("models", "pull", f"{compute_org.slug}/nope", str(tmp_path / "x"))
    assert missing.returncode == 2
    assert "No such repository" in missing.stderr
    elsewhere = cli("models", "pull", "another-org/my-adapter", str(tmp_path / "y"))
    assert elsewhere.returncode == 2
