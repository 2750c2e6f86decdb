"""runner.slurmctl's parts that need no cluster: the batch script's environment, the token
file, and how failures are told apart (the cluster tests are tests/providers/test_slurm.py)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from contextlib import redirect_stdout

from runner import slurmctl

# LC_CTYPE: python's own locale coercion (PEP 538), not the script's.
DUMP_ENV = (
    "import json, os, sys; os.environ.pop('LC_CTYPE', None); "
    "json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
)


def test_the_batch_script_runs_the_runner_in_an_environment_of_its_own(tmp_path):
    dump = tmp_path / "env.json"
    bundle = tmp_path / "bundle.py"  # stands in for the zipapp: records its environment
    bundle.write_text(f"import sys; sys.argv.append({str(dump)!r})\n{DUMP_ENV}\n")
    env = {"PATH": "/usr/bin:/bin", "TRAINYARD_CONTROL_URL": "http://cp:8000", "ODD": "a'b $X \""}
    script = tmp_path / "batch.sh"
    script.write_text(slurmctl.batch_script(tmp_path, sys.executable, str(bundle), env))
    job_env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SECRET_KEY": "control plane's"}

    subprocess.run(["sh", str(script)], env=job_env, check=True)

    assert json.loads(dump.read_text()) == {
        **env,
        "SLURM_JOB_ID": "42",  # what Slurm says of the job is kept, nothing else of its env
        "TRAINYARD_RUNNER_TOKEN_FILE": str(tmp_path / "runner.token"),
        "TRAINYARD_WORKDIR": str(tmp_path),
    }


def test_the_token_file_is_private_and_replaces_a_leftover(tmp_path):
    (tmp_path / "runner.token").write_text("old")
    path = slurmctl.write_token(tmp_path, "s3cret")
    assert path.read_text() == "s3cret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_controller_that_does_not_answer_is_retryable_and_a_refusal_is_not():
    def failure(stderr: str) -> slurmctl.SlurmError:
        return slurmctl._failure(["sbatch"], subprocess.CompletedProcess([], 1, "", stderr))

    unreachable = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
    assert failure(unreachable).retryable
    assert not failure(
        "sbatch: error: Batch job submission failed: Invalid partition name"
    ).retryable


def test_a_bad_command_line_answers_a_json_error():
    out = io.StringIO()
    with redirect_stdout(out):
        assert slurmctl.main(["poll"]) == 1
    answer = json.loads(out.getvalue())
    assert answer["retryable"] is False and answer["error"].startswith("usage: slurmctl")


def test_an_exit_record_is_read_only_when_it_is_whole(tmp_path):
    assert slurmctl.recorded_exit(tmp_path) is None
    (tmp_path / "exit.json").write_text('{"exit_code": ')
    assert slurmctl.recorded_exit(tmp_path) is None
    (tmp_path / "exit.json").write_text('{"exit_code": 7}')
    assert slurmctl.recorded_exit(tmp_path) == 7
