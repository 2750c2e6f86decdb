"""`trainyard sweep` against the real API: the command line runs in-process and its HTTP
goes straight into this Django app (httpx's WSGI transport), on the test's database."""

from __future__ import annotations

import json

import pytest

from apps.sweeps.models import Sweep
from trainyard_cli.main import run

pytestmark = pytest.mark.django_db

SWEEP_YAML = """\
project: vision
name: lr sweep
template:
  name: tiny
  model: /models/tiny
  dataset: /data/alpaca.jsonl
  dataset_format: alpaca
params:
  learning_rate: [1.0e-3, 3.0e-3]
  max_steps: [2, 4]
concurrency: 2
max_cost_usd: "2.50"
"""


@pytest.fixture
def cli(cli_transport, project):
    """`trainyard …` against this test's app, in a project the sweep files name."""
    return lambda *argv: run(list(argv), transport=cli_transport)


def test_sweep_create_from_a_yaml_file_then_show_and_cancel(cli, project, tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_YAML)

    assert cli("sweep", "create", "-f", str(path)) == 0

    sweep = Sweep.objects.get()
    assert capsys.readouterr().out.strip() == sweep.public_id
    assert (sweep.project, sweep.concurrency, sweep.max_cost_micros) == (project, 2, 2_500_000)
    assert sweep.trials.count() == 4

    assert cli("sweep", "show", sweep.public_id, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["id"], shown["counts"]) == (
        sweep.public_id,
        {"total": 4, "requested": 2, "pending": 2},
    )
    assert cli("sweep", "show", sweep.public_id) == 0
    assert "learning_rate" in capsys.readouterr().out

    assert cli("sweep", "list", "--project", "vision") == 0
    assert sweep.public_id in capsys.readouterr().out

    assert cli("sweep", "cancel", sweep.public_id) == 0
    assert "stopped: cancelled" in capsys.readouterr().err
    sweep.refresh_from_db()
    assert sweep.status_label == "stopped: cancelled"


def test_a_file_that_is_not_yaml_names_the_line_and_creates_nothing(cli, tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: x\nparams: [1, 2\nconcurrency: 2\n")

    assert cli("sweep", "create", "-f", str(path)) == 2

    assert "not valid YAML at line 3" in capsys.readouterr().err
    assert not Sweep.objects.exists()


def test_a_bad_value_shows_the_apis_param_and_exits_2(cli, tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_YAML.replace("[2, 4]", "[2, 0]"))

    assert cli("sweep", "create", "-f", str(path)) == 2

    error = capsys.readouterr().err
    assert "param: params.max_steps" in error and "invalid_request" in error
    assert not Sweep.objects.exists()
