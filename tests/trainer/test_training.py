"""`python -m trainer` end to end, as real processes training the tiny random Llama on the toy
datasets: formats, metrics, checkpoints, resume, signals, grading and the adapter.

A run alone spends most of its time importing torch, so the runs are forked from one process
that did the imports (tests/trainer/zygote.py; the run signalled before its imports is a
process of its own), those that do not depend on one another start together (`runs`), and
those that resume from their checkpoints follow (`resumed`). Runs use one thread each and are
deterministic: the same config gives the same losses to the last bit, which the resume tests
rely on.
"""

from __future__ import annotations

import functools
import json
import math
import signal

import pytest

from tests.trainer.conftest import Finished, Running, start_trainer
from trainer.data import held_out_positions
from trainer.formats import FORMATS

SHORT = {"max_steps": 6, "save_steps": 3}
# The long run: also the uninterrupted run that the resumed ones must reproduce.
LONG = {"max_steps": 40, "save_steps": 10}


def config(model, dataset, dataset_format: str, **overrides) -> dict:
    return {
        "model": str(model),
        "dataset": str(dataset),
        "dataset_format": dataset_format,
        "learning_rate": 0.01,
        "max_length": 128,
        "batch_size": 4,
        **SHORT,
        **overrides,
    }


def signal_after(text: str, signum: int):
    """An `on_line` that sends `signum` once a line holding `text` is out."""
    sent = []

    def on_line(running: Running, line: str) -> None:
        if not sent and text in line:
            sent.append(True)
            running.process.send_signal(signum)

    return on_line


def write_contradicting_dataset(path, *, rows: int = 40, eval_fraction: float = 0.25) -> None:
    """Rows whose answer is token 100, except the rows the trainer will hold out (seed 42),
    whose answer to the same prompt is token 101: learning the training rows can only make the
    held-out loss worse, every time."""
    held_out = held_out_positions(rows, eval_fraction=eval_fraction, seed=42)
    with path.open("w") as file:
        for index in range(rows):
            answer = [101] * 4 if index in held_out else [100] * 4
            row = {"input_ids": [97, 105, 99, *answer], "labels": [-100] * 3 + answer}
            file.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def runs(tiny_model, demo_data, tmp_path_factory, trainer_zygote) -> dict[str, Finished]:
    def out(name: str):
        return tmp_path_factory.mktemp(name)

    start = functools.partial(start_trainer, zygote=trainer_zygote)

    alpaca = demo_data["alpaca"]
    worse = out("worse-data") / "worse.jsonl"
    write_contradicting_dataset(worse)
    started = {fmt: start(config(tiny_model, demo_data[fmt], fmt), out(fmt)) for fmt in FORMATS}
    started["long"] = start(config(tiny_model, alpaca, "alpaca", **LONG), out("long"))
    for name, signum in (("sigusr1", signal.SIGUSR1), ("sigterm", signal.SIGTERM)):
        started[name] = start(
            config(tiny_model, alpaca, "alpaca", **LONG),
            out(name),
            on_line=signal_after('"type": "metrics"', signum),
        )
    # The first line is printed once the dataset is read, while torch is still to be imported:
    # a process of its own (a zygote's child has torch already).
    started["sigusr1_in_setup"] = start_trainer(
        config(tiny_model, alpaca, "alpaca"),
        out("sigusr1-in-setup"),
        on_line=signal_after("trainer: read", signal.SIGUSR1),
    )
    # Adam moves every weight by about the learning rate on its first step: 1e30 overflows.
    started["nan"] = start(config(tiny_model, alpaca, "alpaca", learning_rate=1e30), out("nan"))
    started["worse"] = start(
        config(tiny_model, worse, "pretokenized", max_steps=10, eval_fraction=0.25), out("worse")
    )
    started["no_model"] = start(
        config(tiny_model.parent / "missing", alpaca, "alpaca"), out("no-model")
    )
    # What the dashboard's form sends, and nothing else.
    started["defaults"] = start(
        {
            "model": str(tiny_model),
            "dataset": str(demo_data["text"]),
            "dataset_format": "text",
            "max_samples": 12,
            "max_steps": None,
            "learning_rate": 0.01,
        },
        out("defaults"),
    )
    return {name: running.wait() for name, running in started.items()}


@pytest.fixture(scope="module")
def resumed(runs, tiny_model, demo_data, tmp_path_factory, trainer_zygote) -> dict[str, Finished]:
    start = functools.partial(start_trainer, zygote=trainer_zygote)

    long_config = config(tiny_model, demo_data["alpaca"], "alpaca", **LONG)
    stopped_at = runs["sigusr1"].events("stopped")[0]["checkpoint"]
    started = {
        "from_10": start(
            long_config,
            tmp_path_factory.mktemp("from-10"),
            resume_from=runs["long"].checkpoint_dir / "checkpoint-10",
        ),
        "after_sigusr1": start(
            long_config, tmp_path_factory.mktemp("after-sigusr1"), resume_from=stopped_at
        ),
        # A run stopped right after its last step (and preempted before its adapter was out).
        "from_40": start(
            long_config,
            tmp_path_factory.mktemp("from-40"),
            resume_from=runs["long"].checkpoint_dir / "checkpoint-40",
        ),
    }
    return {name: running.wait() for name, running in started.items()}


def assert_complete_checkpoint(path, step: int) -> None:
    for name in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert (path / name).is_file(), name
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["global_step"] == step


@pytest.mark.parametrize("dataset_format", FORMATS)
def test_it_trains_each_format_and_reports_metrics_checkpoints_and_the_adapter(
    runs, dataset_format
):
    run = runs[dataset_format]

    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    points = run.points()
    # One point per step, and nothing else the parser would count: no Trainer dicts, and the
    # checkpoint, grading and adapter lines are passed over.
    assert [point.step for point in points] == [1, 2, 3, 4, 5, 6]
    assert len(run.events("metrics")) == 6
    assert all(math.isfinite(point.loss) for point in points)
    assert all(point.learning_rate > 0 and point.epoch > 0 for point in points)
    assert all(point.extra["tokens_per_s"] > 0 and "grad_norm" in point.extra for point in points)
    checkpoints = run.events("checkpoint")
    assert [event["step"] for event in checkpoints] == [3, 6]
    for event in checkpoints:
        assert event["path"] == str(run.checkpoint_dir / f"checkpoint-{event['step']}")
        assert_complete_checkpoint(
            run.checkpoint_dir / f"checkpoint-{event['step']}", event["step"]
        )
    [grading] = run.events("grading")
    assert grading["passed"] is True
    assert grading["eval_loss_after"] <= grading["eval_loss_before"]
    assert run.events("adapter") == [
        {"type": "adapter", "path": str(run.checkpoint_dir / "adapter")}
    ]
    assert (run.checkpoint_dir / "adapter" / "adapter_config.json").is_file()
    assert (run.checkpoint_dir / "adapter" / "adapter_model.safetensors").is_file()


def test_it_learns_the_toy_task(runs):
    run = runs["long"]

    assert run.returncode == 0, run.stderr
    losses = run.losses()
    assert sorted(losses) == list(range(1, 41))
    assert losses[40] < 0.7 * losses[1]
    assert [event["step"] for event in run.events("checkpoint")] == [10, 20, 30, 40]


def test_a_run_resumed_from_its_step_10_checkpoint_ends_as_the_uninterrupted_run(runs, resumed):
    run = resumed["from_10"]

    assert run.returncode == 0, run.stderr
    [start] = run.events("train_start")
    assert (start["step"], start["max_steps"]) == (10, 40)
    steps = [point.step for point in run.points()]
    assert steps == list(range(11, 41))
    assert run.losses()[40] == pytest.approx(runs["long"].losses()[40], rel=1e-3)
    assert run.events("grading")[0]["passed"] is True
    assert (run.checkpoint_dir / "adapter").is_dir()


def test_sigusr1_checkpoints_the_current_step_and_exits_0(runs):
    run = runs["sigusr1"]

    assert run.returncode == 0, run.stderr
    step = run.points()[-1].step
    assert step < 40
    assert run.events("checkpoint")[-1] == {
        "type": "checkpoint",
        "step": step,
        "path": str(run.checkpoint_dir / f"checkpoint-{step}"),
    }
    assert_complete_checkpoint(run.checkpoint_dir / f"checkpoint-{step}", step)
    assert run.events("stopped") == [
        {
            "type": "stopped",
            "step": step,
            "signal": "SIGUSR1",
            "checkpoint": str(run.checkpoint_dir / f"checkpoint-{step}"),
        }
    ]
    # Stopped, not finished: no grading and no adapter.
    assert run.events("grading") == run.events("adapter") == []
    assert not (run.checkpoint_dir / "adapter").exists()


def test_sigusr1_before_training_exits_0_with_nothing_to_save(runs):
    run = runs["sigusr1_in_setup"]

    assert run.returncode == 0, run.stderr
    assert run.events("stopped") == [
        {"type": "stopped", "step": None, "signal": "SIGUSR1", "checkpoint": None}
    ]
    assert "nothing to checkpoint" in run.stderr
    assert list(run.checkpoint_dir.iterdir()) == []


def test_a_run_resumed_after_sigusr1_ends_as_the_uninterrupted_run(runs, resumed):
    stopped = runs["sigusr1"].events("stopped")[0]["step"]
    run = resumed["after_sigusr1"]

    assert run.returncode == 0, run.stderr
    assert run.points()[0].step == stopped + 1
    assert run.losses()[40] == pytest.approx(runs["long"].losses()[40], rel=1e-3)


def test_a_run_resumed_from_its_last_step_trains_no_more_and_finishes(runs, resumed):
    run = resumed["from_40"]

    assert run.returncode == 0, run.stderr
    assert run.points() == []  # no step 41
    assert "trainer: the checkpoint is at the last step (40): finishing" in run.lines
    grading = run.events("grading")[0]
    long_grading = runs["long"].events("grading")[0]
    assert grading["passed"] is True
    assert grading["eval_loss_after"] == pytest.approx(long_grading["eval_loss_after"], rel=1e-4)
    assert (run.checkpoint_dir / "adapter" / "adapter_config.json").is_file()


def test_sigterm_checkpoints_the_current_step_and_exits_143(runs):
    run = runs["sigterm"]

    assert run.returncode == 143, run.stderr
    step = run.points()[-1].step
    [stopped] = run.events("stopped")
    assert (stopped["step"], stopped["signal"]) == (step, "SIGTERM")
    assert stopped["checkpoint"] == str(run.checkpoint_dir / f"checkpoint-{step}")
    assert_complete_checkpoint(run.checkpoint_dir / f"checkpoint-{step}", step)


def test_a_nan_loss_fails_grading_with_exit_3_and_no_final_adapter(runs):
    run = runs["nan"]

    assert run.returncode == 3, run.stderr
    assert "grading failed: loss is NaN" in run.stderr
    # The NaN reaches the control plane as a NaN loss, and training stops at that step.
    last = run.points()[-1]
    assert math.isnan(last.loss)
    assert last.step < 6
    assert all(event["step"] < last.step for event in run.events("checkpoint"))
    [grading] = run.events("grading")
    assert grading["passed"] is False
    assert math.isnan(grading["eval_loss_after"])
    assert run.events("adapter") == []
    assert run.events("adapter_rejected") == [
        {"type": "adapter_rejected", "path": str(run.checkpoint_dir / "adapter-rejected")}
    ]
    assert not (run.checkpoint_dir / "adapter").exists()


def test_a_worse_held_out_loss_fails_grading_with_exit_3(runs):
    run = runs["worse"]

    assert run.returncode == 3, run.stderr
    [grading] = run.events("grading")
    assert grading["passed"] is False
    assert grading["eval_loss_after"] > grading["eval_loss_before"]
    before, after = grading["eval_loss_before"], grading["eval_loss_after"]
    assert (
        f"grading failed: held-out loss got worse (before {before:.6g}, after {after:.6g})"
        in run.stderr
    )
    assert not (run.checkpoint_dir / "adapter").exists()
    assert (run.checkpoint_dir / "adapter-rejected" / "adapter_config.json").is_file()


def test_a_model_that_cannot_be_loaded_exits_2(runs):
    run = runs["no_model"]

    assert run.returncode == 2
    assert "cannot load model" in run.stderr
    assert "Traceback" not in run.stderr
    assert list(run.checkpoint_dir.iterdir()) == []


# peft reads a model attribute that transformers 5 deprecated.
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_the_adapter_loads_with_peft_and_generates(runs, tiny_model):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = runs["long"].checkpoint_dir / "adapter"
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter)
    model.eval()
    inputs = tokenizer("### Instruction:\nReverse the letters.", return_tensors="pt")

    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=5, do_sample=False)
        tuned = model(**inputs).logits
        with model.disable_adapter():
            base = model(**inputs).logits

    assert output.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(tokenizer.decode(output[0]), str)
    assert not torch.allclose(tuned, base)  # the adapter changes what the model says


def test_it_trains_by_epochs_with_only_the_forms_keys(runs):
    run = runs["defaults"]

    assert run.returncode == 0, run.stderr
    [start] = run.events("train_start")
    # 12 of the 64 rows, 1 held out: 11 to train on in batches of 4, so one epoch is 3 steps.
    assert (start["train_rows"], start["held_out_rows"], start["max_steps"]) == (11, 1, 3)
    assert [point.step for point in run.points()] == [1, 2, 3]
    assert [event["step"] for event in run.events("checkpoint")] == [3]
    assert run.events("adapter")
