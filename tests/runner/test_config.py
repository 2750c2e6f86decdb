"""Configuration and the pieces of the spec the runner derives the workload from."""

from __future__ import annotations

import base64

import pytest

from runner.config import ConfigError, load_config
from runner.spec import JobSpec, SpecError
from runner.workload import exit_code_of, workload_argv, workload_env

ENV = {
    "TRAINYARD_CONTROL_URL": "http://127.0.0.1:8000/",
    "TRAINYARD_JOB_ID": "job_x",
    "TRAINYARD_RUNNER_TOKEN": "tok",
    "TRAINYARD_WORKDIR": "/tmp/attempt-1",
}


def test_it_reads_the_four_variables():
    config = load_config(ENV)

    assert config.control_url == "http://127.0.0.1:8000"
    assert (config.job_id, config.token, str(config.workdir)) == ("job_x", "tok", "/tmp/attempt-1")
    assert "tok" not in repr(config)


def test_it_names_every_missing_variable():
    env = {**ENV, "TRAINYARD_RUNNER_TOKEN": " "}
    del env["TRAINYARD_WORKDIR"]

    with pytest.raises(ConfigError, match="TRAINYARD_RUNNER_TOKEN, TRAINYARD_WORKDIR"):
        load_config(env)


def test_the_token_comes_from_the_token_file_which_is_deleted_on_reading(tmp_path):
    token_file = tmp_path / "runner.token"
    token_file.write_text("tyr_file_token\n")
    token_file.chmod(0o600)
    env = {**ENV, "TRAINYARD_RUNNER_TOKEN_FILE": str(token_file)}
    del env["TRAINYARD_RUNNER_TOKEN"]

    config = load_config(env)

    assert config.token == "tyr_file_token"
    assert not token_file.exists()
    assert "tyr_file_token" not in repr(config)


def test_the_token_file_wins_over_the_variable(tmp_path):
    token_file = tmp_path / "runner.token"
    token_file.write_text("from-file")

    config = load_config({**ENV, "TRAINYARD_RUNNER_TOKEN_FILE": str(token_file)})

    assert config.token == "from-file"
    assert not token_file.exists()


def test_a_missing_or_empty_token_file_is_a_config_error_and_is_deleted(tmp_path):
    env = {**ENV, "TRAINYARD_RUNNER_TOKEN_FILE": str(tmp_path / "gone")}
    with pytest.raises(ConfigError, match="cannot read TRAINYARD_RUNNER_TOKEN_FILE"):
        load_config(env)
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_config({**ENV, "TRAINYARD_RUNNER_TOKEN_FILE": str(empty)})
    assert not empty.exists()


def test_the_workload_env_drops_the_runner_variables_and_adds_the_spec_env():
    spec = JobSpec.from_json({"env": {"USER_VAR": "x", "TRAINYARD_JOB_ID": "job_x"}})

    env = workload_env(
        spec,
        {**ENV, "TRAINYARD_RUNNER_TOKEN_FILE": "/w/runner.token", "PATH": "/bin", "USER_VAR": "o"},
    )

    assert env == {"TRAINYARD_JOB_ID": "job_x", "PATH": "/bin", "USER_VAR": "x"}


def test_the_spec_falls_back_to_the_page_defaults():
    spec = JobSpec.from_json({"command": ["true"], "heartbeat_interval_s": "soon"})

    assert spec.heartbeat_interval_s == 5.0
    assert spec.log_batch_max_lines == 1000
    assert spec.log_batch_max_interval_s == 0.25
    assert spec.terminate_grace_s == 10.0
    assert spec.final_flush_timeout_s == 600.0


def test_exactly_one_of_command_and_script_is_required(tmp_path):
    with pytest.raises(SpecError):
        workload_argv(JobSpec.from_json({}), tmp_path)
    both = {"command": ["true"], "script_b64": base64.b64encode(b"true").decode()}
    with pytest.raises(SpecError):
        workload_argv(JobSpec.from_json(both), tmp_path)
    with pytest.raises(SpecError):
        workload_argv(JobSpec.from_json({"script_b64": "not base64!"}), tmp_path)

    assert workload_argv(JobSpec.from_json({"command": ["python", "t.py"]}), tmp_path) == [
        "python",
        "t.py",
    ]


def test_a_signal_death_is_reported_as_128_plus_the_signal():
    assert [exit_code_of(code) for code in (-15, -9, 3, 0)] == [143, 137, 3, 0]
