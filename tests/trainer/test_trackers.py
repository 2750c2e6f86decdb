"""The trainer reports to W&B and MLflow (`trainer/trackers.py`), checked through the
libraries' own offline modes: W&B's offline run files, read back with `wandb leet inspect`,
and an MLflow file store, read back with `MlflowClient`. A tracker that cannot be reached, or
whose package is missing, costs a warning line and never the run.

Two short runs start together: the offline one forked from the module's zygote, and one where
W&B's server cannot be reached and MLflow's package is missing, as a process of its own (a
zygote's child would inherit whatever it imported). Both failures go through the same guard
(`trainer.trackers.Reporting`), one tracker each, so one run covers both.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import Finished, start_trainer
from trainer.trackers import mlflow_run_url, trackers_from_env

JOB_ID = "job_trackertest"


def config(tiny_model, demo_data) -> dict:
    return {
        "model": str(tiny_model),
        "dataset": str(demo_data["alpaca"]),
        "dataset_format": "alpaca",
        "learning_rate": 0.01,
        "max_length": 128,
        "max_steps": 3,
        "save_steps": 3,
    }


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def without_packages(root: Path, *names: str) -> Path:
    """A directory that, first on PYTHONPATH, makes `import <name>` fail as it does where the
    package is not installed: the fine-tune image may lack both."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / f"{name}.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    return root


@pytest.fixture(scope="module")
def runs(tiny_model, demo_data, tmp_path_factory, trainer_zygote) -> dict:
    tmp = tmp_path_factory.mktemp("trackers")
    (tmp / "wandb").mkdir()
    offline = {
        "TRAINYARD_JOB_ID": JOB_ID,
        "TRAINYARD_ATTEMPT": "1",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp / "wandb"),
        "MLFLOW_TRACKING_URI": (tmp / "mlruns").as_uri(),
        # MLflow 3 refuses a file store unless asked: its offline mode for tests like this one.
        "MLFLOW_ALLOW_FILE_STORE": "true",
    }
    unreachable_or_missing = {
        "WANDB_API_KEY": "k" * 40,
        "WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}",
        "WANDB_INIT_TIMEOUT": "5",
        "WANDB_DIR": str(tmp / "wandb-unreachable"),
        "MLFLOW_TRACKING_URI": (tmp / "mlruns-missing").as_uri(),
        "PYTHONPATH": str(without_packages(tmp / "shadow", "mlflow")),
    }
    (tmp / "wandb-unreachable").mkdir()
    train = config(tiny_model, demo_data)
    started = {
        "offline": start_trainer(train, tmp / "out-offline", zygote=trainer_zygote, env=offline),
        "failing": start_trainer(train, tmp / "out-failing", env=unreachable_or_missing),
    }
    finished = {name: running.wait() for name, running in started.items()}
    return {
        "finished": finished,
        "wandb_dir": tmp / "wandb",
        "mlflow_uri": offline["MLFLOW_TRACKING_URI"],
    }


def tracker_runs(run: Finished) -> dict[str, dict]:
    return {line["tracker"]: line for line in run.events("tracker_run")}


def test_it_reports_losses_and_config_to_wandb_offline(runs):
    run: Finished = runs["finished"]["offline"]
    assert run.returncode == 0, run.stderr
    announced = tracker_runs(run)["wandb"]
    assert announced["url"] is None  # an offline run has no page yet
    run_dirs = list((runs["wandb_dir"] / "wandb").glob(f"offline-run-*-{announced['run_id']}"))
    assert len(run_dirs) == 1

    inspected = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dirs[0])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    records = [json.loads(line) for line in inspected.stdout.splitlines() if line.strip()]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    losses = {int(item["_step"]): item["train/loss"] for item in history if "train/loss" in item}
    assert losses == pytest.approx(run.losses())
    assert sorted(losses) == [1, 2, 3]
    assert any("eval/loss" in item for item in history)
    (started,) = [r["run"] for r in records if r["type"] == "run"]
    assert started["config"]["update"]["learning_rate"] == 0.01
    assert started["config"]["update"]["max_steps"] == 3
    assert started["run_id"] == announced["run_id"]


def test_it_reports_loss_history_and_params_to_an_mlflow_file_store(runs, monkeypatch):
    from mlflow.tracking import MlflowClient

    run: Finished = runs["finished"]["offline"]
    announced = tracker_runs(run)["mlflow"]
    assert announced["url"] is None  # a file store has no page
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=runs["mlflow_uri"])

    stored = client.get_run(announced["run_id"])
    assert stored.info.status == "FINISHED"
    assert stored.info.run_name == f"{JOB_ID}-attempt-1"
    assert stored.data.tags["trainyard.job_id"] == JOB_ID
    assert stored.data.params["learning_rate"] == "0.01"
    assert stored.data.params["dataset_format"] == "alpaca"
    history = client.get_metric_history(announced["run_id"], "train/loss")
    assert {point.step: point.value for point in history} == pytest.approx(run.losses())
    assert client.get_experiment(stored.info.experiment_id).name == "trainyard"


def test_an_unreachable_tracker_or_a_missing_package_costs_a_warning_and_not_the_run(runs):
    run: Finished = runs["finished"]["failing"]
    assert run.returncode == 0, run.stderr
    assert run.events("tracker_run") == []
    assert "trainer: warning: W&B: cannot start a run (" in run.stderr
    assert "MLflow reporting is asked for, but mlflow is not installed here" in run.stderr
    assert sorted(run.losses()) == [1, 2, 3]
    assert len(run.events("adapter")) == 1


def test_the_environment_names_the_trackers():
    assert trackers_from_env({}) == []
    assert trackers_from_env({"WANDB_MODE": "disabled", "WANDB_API_KEY": "k"}) == []
    assert [t.label for t in trackers_from_env({"WANDB_API_KEY": "k"})] == ["W&B"]
    assert [t.label for t in trackers_from_env({"WANDB_MODE": "offline"})] == ["W&B"]
    both = {"WANDB_API_KEY": "k", "MLFLOW_TRACKING_URI": "http://mlflow:5000"}
    assert [t.label for t in trackers_from_env(both)] == ["W&B", "MLflow"]


def test_an_mlflow_run_links_to_its_server_page_without_credentials():
    url = mlflow_run_url("https://me:pw@mlflow.example.com/base/", "3", "abc")
    assert url == "https://mlflow.example.com/base/#/experiments/3/runs/abc"
    url = mlflow_run_url("http://127.0.0.1:5000", "0", "r1")
    assert url == "http://127.0.0.1:5000/#/experiments/0/runs/r1"
    assert mlflow_run_url("databricks", "1", "r1") is None
    assert mlflow_run_url("file:///tmp/mlruns", "1", "r1") is None
