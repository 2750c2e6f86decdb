"""The trainer's config: defaults, the output directory, and errors that name every key."""

from __future__ import annotations

import json

import pytest

from trainer.config import ConfigError, TrainConfig, load_config

FORM = {
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset": "/data/alpaca.jsonl",
    "dataset_format": "alpaca",
    "max_samples": None,
    "max_steps": 40,
    "learning_rate": 0.0002,
}


def test_it_takes_what_the_form_sends_and_fills_in_the_rest(tmp_path):
    config = TrainConfig.from_dict(FORM, environ={"TRAINYARD_CHECKPOINT_DIR": str(tmp_path)})

    assert (config.model, config.dataset, config.dataset_format) == (
        "Qwen/Qwen2.5-0.5B-Instruct",
        "/data/alpaca.jsonl",
        "alpaca",
    )
    assert (config.max_samples, config.max_steps, config.learning_rate) == (None, 40, 2e-4)
    assert (config.num_epochs, config.max_length, config.batch_size) == (1.0, 512, 4)
    assert (config.gradient_accumulation, config.save_steps, config.logging_steps) == (1, 10, 1)
    assert (config.lora_r, config.lora_alpha, config.lora_dropout) == (16, 32.0, 0.05)
    assert config.lora_target_modules is None
    assert (config.eval_fraction, config.seed, config.save_total_limit) == (0.1, 42, None)
    assert config.output_dir == str(tmp_path)


def test_it_writes_to_dot_output_without_a_checkpoint_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    config = TrainConfig.from_dict(FORM, environ={"TRAINYARD_CHECKPOINT_DIR": ""})

    assert config.output_dir == str(tmp_path / "output")


def test_an_explicit_output_dir_wins(tmp_path):
    config = TrainConfig.from_dict(
        {**FORM, "output_dir": str(tmp_path / "mine")},
        environ={"TRAINYARD_CHECKPOINT_DIR": "/elsewhere"},
    )

    assert config.output_dir == str(tmp_path / "mine")


def test_it_takes_target_modules_as_a_list_or_a_comma_separated_string():
    as_list = TrainConfig.from_dict({**FORM, "lora_target_modules": ["q_proj", "v_proj"]})
    as_text = TrainConfig.from_dict({**FORM, "lora_target_modules": "q_proj, v_proj"})

    assert as_list.lora_target_modules == as_text.lora_target_modules == ("q_proj", "v_proj")


def test_it_names_every_problem_at_once():
    data = {
        "model": "",
        "dataset_format": "parquet",
        "max_steps": 0,
        "learning_rate": True,
        "eval_fraction": 1,
        "batch_size": 2.5,
        "seeed": 1,
    }

    with pytest.raises(ConfigError) as caught:
        TrainConfig.from_dict(data)

    message = str(caught.value)
    for problem in (
        "unknown key(s): seeed",
        "'model' is required",
        "'dataset' is required",
        "'dataset_format' must be one of alpaca, chatml, sharegpt, prompt_completion, text, "
        "pretokenized",
        "'max_steps' must be a whole number of at least 1",
        "'learning_rate' must be a number greater than 0",
        "'eval_fraction' must be a number in (0, 1)",
        "'batch_size' must be a whole number of at least 1",
    ):
        assert problem in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the config is empty"),
        ("{not json", "the config is not valid JSON"),
        ("[1, 2]", "the config must be a JSON object, got list"),
    ],
)
def test_it_refuses_config_text_that_is_not_an_object(text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(json_text=text)


def test_it_reads_a_config_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(FORM))

    assert load_config(path=str(tmp_path / "config.json")).max_steps == 40
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(path=str(tmp_path / "missing.json"))


def test_merging_is_asked_for_with_a_boolean():
    assert TrainConfig.from_dict(FORM).merge is False
    assert TrainConfig.from_dict({**FORM, "merge": True}).merge is True
    with pytest.raises(ConfigError, match="'merge' must be true or false"):
        TrainConfig.from_dict({**FORM, "merge": "yes"})
