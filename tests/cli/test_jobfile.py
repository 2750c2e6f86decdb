"""Reading a job file: every value's line, so the API's dotted `param` lands on it."""

from __future__ import annotations

import textwrap

import pytest

from trainyard_cli import jobfile
from trainyard_cli.commands.apply import parse_sets

TEXT = textwrap.dedent(
    """\
    # a comment
    name: train
    compute:
      accelerator: cpu
      gpu_count: 1
    container:
      image: python:3.12
      command:
        - python
        - train.py
      env:
        LR: "2e-4"
    """
)


def load(tmp_path, text: str) -> jobfile.JobFile:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return jobfile.load(str(path))


@pytest.mark.parametrize(
    ("param", "line"),
    [
        ("name", 2),
        ("compute.gpu_count", 5),
        ("container.command[1]", 10),
        ("container.command.0", 9),
        ("container.env.LR", 12),
        ("container.secret_env.X", 6),  # not in the file: its nearest parent
        ("limits.max_cost_usd", 1),
        (None, 1),
    ],
    ids=lambda value: str(value),
)
def test_a_param_maps_to_its_line(tmp_path, param, line):
    assert load(tmp_path, TEXT).line_of(param) == line


def test_the_body_is_the_file_less_kind_and_project_plus_the_file(tmp_path):
    job_file = load(tmp_path, "kind: finetune\nproject: vision\nname: ft\nlearning_rate: 1.0e-4\n")
    assert job_file.kind == "finetune"
    assert job_file.body() == {
        "name": "ft",
        "learning_rate": 0.0001,
        "job_file": {"name": "job.yaml", "content": job_file.text},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: a\nname: b\n", "job.yaml:2: name: given twice"),
        ("- a\n- b\n", "job.yaml:1: a job file is a mapping of fields"),
        ("name: [a\n", "job.yaml:2: not valid YAML"),
        ("name: a\nkind: sweep\n", "job.yaml:2: kind: 'sweep' is not a kind of job"),
        ("kind: finetune\nname: a\n", "job.yaml:1: kind: A fine-tune names its project"),
        ("env: &e {A: b}\nother: *e\n", "job.yaml:2: other: anchors and aliases"),
    ],
    ids=["duplicate", "not-a-mapping", "bad-yaml", "unknown-kind", "no-project", "alias"],
)
def test_a_malformed_file_is_refused_naming_the_line(tmp_path, text, message):
    with pytest.raises(jobfile.JobFileError) as raised:
        load(tmp_path, text)
    assert raised.value.message.startswith(message)


def test_set_overrides_nest_and_read_json_values():
    assert parse_sets(["learning_rate=1e-4", "compute.gpu_count=2", "name=again", "a.b=null"]) == {
        "learning_rate": 0.0001,
        "compute": {"gpu_count": 2},
        "name": "again",
        "a": {"b": None},
    }
