"""Input the trainer cannot use: exit 2, one clear line on stderr, nothing written. These runs
fail before torch is imported, so each takes a fraction of a second."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.trainer.conftest import REPO, run_trainer
from trainer.demo_data import letter_sequences, rows_for

# Never loaded: the dataset is checked first.
MODEL = "models/never-loaded"


def write_rows(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def assert_refused(run, message: str) -> None:
    assert run.returncode == 2
    assert message in run.stderr
    assert "Traceback" not in run.stderr
    assert not any(line.startswith("{") for line in run.lines)
    assert list(run.checkpoint_dir.iterdir()) == []


def test_it_names_the_row_and_field_an_alpaca_row_is_missing(tmp_path):
    rows = rows_for("alpaca", letter_sequences(10))
    del rows[6]["output"]
    write_rows(tmp_path / "data.jsonl", rows)

    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "data.jsonl"), "dataset_format": "alpaca"},
        tmp_path / "out",
    )

    assert_refused(run, "row 7: missing field 'output' (alpaca)")


def test_it_names_the_row_and_field_of_a_bad_chatml_message(tmp_path):
    rows = rows_for("chatml", letter_sequences(10))
    del rows[2]["messages"][2]["content"]
    write_rows(tmp_path / "data.jsonl", rows)

    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "data.jsonl"), "dataset_format": "chatml"},
        tmp_path / "out",
    )

    assert_refused(run, "row 3: missing field 'messages[2].content' (chatml)")


def test_it_names_a_sharegpt_speaker_it_does_not_know(tmp_path):
    rows = rows_for("sharegpt", letter_sequences(10))
    rows[4]["conversations"][1]["from"] = "bot"
    write_rows(tmp_path / "data.jsonl", rows)

    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "data.jsonl"), "dataset_format": "sharegpt"},
        tmp_path / "out",
    )

    assert_refused(
        run,
        "row 5: field 'conversations[1].from' must be one of human, gpt, system, got 'bot' "
        "(sharegpt)",
    )


def test_it_counts_rows_by_line_in_a_jsonl_file(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"text": "a"}\n\n{"text": 5}\n')

    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "data.jsonl"), "dataset_format": "text"},
        tmp_path / "out",
    )

    assert_refused(run, "row 3: field 'text' must be a string, got a number (text)")


def test_it_names_every_bad_config_key(tmp_path):
    run = run_trainer(
        {"model": MODEL, "dataset": "d.jsonl", "learning_rate": -1, "max_stepz": 5},
        tmp_path / "out",
    )

    assert_refused(run, "unknown key(s): max_stepz")
    assert "'learning_rate' must be a number greater than 0" in run.stderr


def test_it_refuses_a_dataset_file_that_does_not_exist(tmp_path):
    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "nope.jsonl"), "dataset_format": "text"},
        tmp_path / "out",
    )

    assert_refused(run, f"dataset file {tmp_path / 'nope.jsonl'} does not exist")


def test_it_refuses_a_resume_path_that_is_not_a_checkpoint(tmp_path):
    write_rows(tmp_path / "data.jsonl", rows_for("text", letter_sequences(4)))
    (tmp_path / "empty").mkdir()

    run = run_trainer(
        {"model": MODEL, "dataset": str(tmp_path / "data.jsonl"), "dataset_format": "text"},
        tmp_path / "out",
        resume_from=tmp_path / "empty",
    )

    assert_refused(run, "cannot resume")


def test_it_reads_the_config_from_a_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model": MODEL}))

    result = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(tmp_path / "config.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2
    assert "'dataset' is required" in result.stderr


def test_it_wants_exactly_one_config_source():
    result = subprocess.run(
        [sys.executable, "-m", "trainer"], cwd=REPO, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert "one of the arguments --config --config-json is required" in result.stderr
