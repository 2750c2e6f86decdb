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


def test_the_workload_env_drops_the_runner_variables_and_adds_the_spec_env():
    spec = JobSpec.from_json({"env": {"USER_VAR": "x", "TRAINYARD_JOB_ID": "job_x"}})

    env = workload_env(spec, {**ENV, "PATH": "/bin", "USER_VAR": "old"})

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
