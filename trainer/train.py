"""One fine-tune run: data, model, LoRA, `Trainer`, grading and the final adapter.

`run` returns the process exit code (see `trainer.cli`). The order matters for how fast a bad
run fails: the dataset is read and checked before torch is imported, and the model is loaded
before the first step so a wrong model id fails before any time is spent training.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from runner.protocol import EXIT_GRADING_FAILED, LINE_ADAPTER, LINE_GRADING, LINE_MERGED
from trainer.config import ConfigError, TrainConfig
from trainer.data import Encoder, encode_and_split, read_samples
from trainer.events import emit, fail, say
from trainer.hub import model_reference
from trainer.stopping import StopRequest
from trainer.trackers import Reporting

# LoRA targets by `config.model_type` where peft's own table is missing or wider than wanted;
# any other architecture gets peft's default for it.
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": _ATTENTION,
    "mistral": _ATTENTION,
    "mixtral": _ATTENTION,
    "qwen2": _ATTENTION,
    "qwen2_moe": _ATTENTION,
    "qwen3": _ATTENTION,
    "qwen3_moe": _ATTENTION,
    "gemma": _ATTENTION,
    "gemma2": _ATTENTION,
    "gemma3_text": _ATTENTION,
    "olmo": _ATTENTION,
    "olmo2": _ATTENTION,
    "granite": _ATTENTION,
    "phi3": ("qkv_proj", "o_proj"),
    "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "bloom": ("query_key_value",),
}
# Their projections are `Conv1D`, whose weight is stored transposed.
_FAN_IN_FAN_OUT = {"gpt2"}


class ModelError(Exception):
    """The model or tokenizer cannot be loaded, or LoRA cannot be applied. The CLI exits 2."""


@dataclass(frozen=True)
class Grade:
    passed: bool
    reason: str | None  # why it failed, for people


def grade(*, eval_loss_before: float, eval_loss_after: float, bad_loss: float | None) -> Grade:
    """A run passes when its training loss stayed finite and its held-out loss did not get
    worse than the base model's."""
    if bad_loss is not None:
        return Grade(False, "loss is NaN" if math.isnan(bad_loss) else "loss is infinite")
    if not math.isfinite(eval_loss_after):
        return Grade(False, f"held-out loss is {eval_loss_after}")
    if eval_loss_after > eval_loss_before:
        return Grade(
            False,
            f"held-out loss got worse (before {eval_loss_before:.6g}, after {eval_loss_after:.6g})",
        )
    return Grade(True, None)


def resolve_checkpoint(path: str | None) -> str | None:
    """The checkpoint to resume from: `path` itself when it is a checkpoint directory, else the
    highest-numbered complete `checkpoint-N` inside it. None when `path` is empty."""
    if not path or not path.strip():
        return None
    directory = Path(path.strip()).expanduser().absolute()
    if not directory.is_dir():
        raise ConfigError(f"cannot resume: {directory} is not a directory")
    if (directory / "trainer_state.json").is_file():
        return str(directory)
    # `Trainer` writes trainer_state.json last, so a checkpoint holding it is complete.
    steps = [
        (int(match.group(1)), child)
        for child in directory.iterdir()
        if (match := re.fullmatch(r"checkpoint-([0-9]+)", child.name))
        and (child / "trainer_state.json").is_file()
    ]
    if not steps:
        raise ConfigError(
            f"cannot resume: {directory} is not a checkpoint (no trainer_state.json) "
            "and holds no complete checkpoint-N directory"
        )
    return str(max(steps)[1])


def checkpoint_step(checkpoint: str | None) -> int:
    """The step a checkpoint directory was saved at (its trainer_state.json), 0 for none."""
    if checkpoint is None:
        return 0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return int(state.get("global_step") or 0)


def run(config: TrainConfig, *, resume_from: str | None = None) -> int:
    """Train, grade and save; the exit code. Raises ConfigError, DataError or ModelError for
    input that cannot be used."""
    stop = StopRequest()
    stop.install()
    samples = read_samples(config.dataset, config.dataset_format, max_samples=config.max_samples)
    checkpoint = resolve_checkpoint(resume_from)
    say(f"read {len(samples)} {config.dataset_format} rows from {config.dataset}")

    # The imports, the model's load and the LoRA wrapping make about a million objects that
    # live as long as the run: the cyclic collector, left on, walks them again and again
    # meanwhile (a sixth of the imports' CPU). Off until the model is ready (a failure on
    # the way ends the process), then they are frozen out of its reach.
    gc.disable()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    # peft reads a model attribute transformers 5 has deprecated; nothing to act on here.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
    transformers.logging.disable_progress_bar()
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    tokenizer, model = _load(config.model, dtype=torch.bfloat16 if bf16 else torch.float32)
    max_length = config.max_length
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and 0 < limit < max_length:
        say(f"max_length {max_length} is over the model's {limit} positions; using {limit}")
        max_length = limit
    encoder = Encoder(
        tokenizer,
        max_length=max_length,
        vocab_size=model.get_input_embeddings().num_embeddings,
    )
    split = encode_and_split(samples, encoder, eval_fraction=config.eval_fraction, seed=config.seed)
    if split.skipped:
        say(f"skipped {split.skipped} rows with no completion tokens within {max_length} tokens")

    transformers.set_seed(config.seed)  # the LoRA weights' initial values
    model = _apply_lora(model, config)
    gc.freeze()
    gc.enable()
    # Opened once the inputs are known good, closed however the run ends (trainer.trackers).
    reporting = Reporting.from_env()
    reporting.start(
        {
            **tracked_config(config),
            "train_rows": len(split.train),
            "held_out_rows": len(split.held_out),
        }
    )
    code: int | None = None
    try:
        code = _train(
            config,
            model,
            tokenizer,
            split,
            checkpoint=checkpoint,
            stop=stop,
            bf16=bf16,
            reporting=reporting,
        )
        return code
    finally:
        reporting.finish(failed=code != 0)


def _train(
    config: TrainConfig, model, tokenizer, split, *, checkpoint, stop, bf16, reporting
) -> int:
    """Train from `checkpoint` (or the start), grade and save; the exit code."""
    import torch
    from transformers import PrinterCallback, Trainer

    from trainer.batching import Collator, Examples
    from trainer.callbacks import (
        CheckpointCallback,
        MetricsCallback,
        StopCallback,
        TrainStartCallback,
    )

    metrics, checkpoints = MetricsCallback(report=reporting.log), CheckpointCallback()
    trainer = Trainer(
        model=model,
        args=_training_arguments(config, bf16=bf16, cpu=not torch.cuda.is_available()),
        train_dataset=Examples(split.train),
        eval_dataset=Examples(split.held_out),
        data_collator=Collator(_pad_id(tokenizer)),
        processing_class=tokenizer,
        callbacks=[metrics, checkpoints, StopCallback(stop)],
    )
    trainer.remove_callback(PrinterCallback)

    with model.disable_adapter():
        eval_loss_before = trainer.evaluate()["eval_loss"]
    say(f"held-out loss of the base model: {eval_loss_before:.6g}")
    reporting.log({"eval/loss": eval_loss_before}, step=checkpoint_step(checkpoint))

    stop.phase = "training"
    trainer.add_callback(TrainStartCallback(len(split.train), len(split.held_out), checkpoint))
    resumed_step = checkpoint_step(checkpoint)
    if config.max_steps is not None and resumed_step >= config.max_steps:
        # Stopped right after its last step: training is over. (Trainer would train one step
        # past max_steps from here.) Only the weights are needed, to grade and save.
        say(f"the checkpoint is at the last step ({resumed_step}): finishing")
        trainer._load_from_checkpoint(checkpoint)
        trainer.state.global_step = resumed_step
    else:
        trainer.train(resume_from_checkpoint=checkpoint)
    # A checkpoint-and-exit request that came with the last step changes nothing: finish.
    over = trainer.state.global_step >= trainer.state.max_steps > 0
    if stop.requested and not (over and stop.signal_name == "SIGUSR1"):
        emit(
            "stopped",
            step=trainer.state.global_step,
            signal=stop.signal_name,
            checkpoint=checkpoints.last_path,
        )
        return stop.exit_code
    stop.phase = "finishing"

    return _grade_and_save(
        trainer,
        tokenizer,
        output_dir=Path(config.output_dir),
        eval_loss_before=eval_loss_before,
        bad_loss=metrics.bad_loss,
        merge=config.merge,
        report=functools.partial(reporting.log, step=trainer.state.global_step),
    )


def tracked_config(config: TrainConfig) -> dict:
    """The config as the trackers record it: plain values, `output_dir` left out (a path on
    the workload's host says nothing about the run)."""
    values = dataclasses.asdict(config)
    values.pop("output_dir")
    if values["lora_target_modules"] is not None:
        values["lora_target_modules"] = ",".join(values["lora_target_modules"])
    return values


def _grade_and_save(
    trainer,
    tokenizer,
    *,
    output_dir: Path,
    eval_loss_before,
    bad_loss,
    merge: bool = False,
    report=None,
) -> int:
    """Grade the trained adapter and write it as `adapter` if it passed, else as
    `adapter-rejected`; with `merge`, a passed one also merged into the base (`merged`).
    `report` gets the held-out loss and the verdict for the trackers. The exit code."""
    eval_loss_after = trainer.evaluate()["eval_loss"]
    result = grade(
        eval_loss_before=eval_loss_before, eval_loss_after=eval_loss_after, bad_loss=bad_loss
    )
    if report is not None:
        report({"eval/loss": eval_loss_after, "grading/passed": float(result.passed)})
    emit(
        LINE_GRADING,
        eval_loss_before=eval_loss_before,
        eval_loss_after=eval_loss_after,
        passed=result.passed,
        reason=result.reason,
    )
    adapter_dir = output_dir / ("adapter" if result.passed else "adapter-rejected")
    trainer.model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    if not result.passed:
        emit("adapter_rejected", path=str(adapter_dir))
        fail(f"grading failed: {result.reason}")
        return EXIT_GRADING_FAILED
    emit(LINE_ADAPTER, path=str(adapter_dir))
    if merge:
        merged_dir = output_dir / "merged"
        trainer.model.merge_and_unload().save_pretrained(merged_dir, safe_serialization=True)
        tokenizer.save_pretrained(merged_dir)
        emit(LINE_MERGED, path=str(merged_dir))
    return 0


def _apply_lora(model, config: TrainConfig):
    from peft import LoraConfig, get_peft_model

    model_type = getattr(model.config, "model_type", "")
    targets = config.lora_target_modules or LORA_TARGETS.get(model_type)
    try:
        return get_peft_model(
            model,
            LoraConfig(
                task_type="CAUSAL_LM",
                r=config.lora_r,
                lora_alpha=config.lora_alpha,
                lora_dropout=config.lora_dropout,
                target_modules=list(targets) if targets else None,
                fan_in_fan_out=model_type in _FAN_IN_FAN_OUT,
            ),
        )
    except ValueError as error:
        raise ModelError(
            f"cannot apply LoRA to {config.model} ({model_type or 'unknown architecture'}): "
            f"{error}; set lora_target_modules"
        ) from None


def _training_arguments(config: TrainConfig, *, bf16: bool, cpu: bool):
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=config.output_dir,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation,
        learning_rate=config.learning_rate,
        num_train_epochs=config.num_epochs,
        max_steps=config.max_steps if config.max_steps is not None else -1,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        # Trainer would replace a NaN loss by the mean of earlier ones; a diverged run must show.
        logging_nan_inf_filter=False,
        include_num_input_tokens_seen="non_padding",
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        eval_strategy="no",
        seed=config.seed,
        bf16=bf16,
        use_cpu=cpu,
        report_to=[],
        disable_tqdm=True,
        remove_unused_columns=False,
        label_names=["labels"],
    )


def _load(name: str, *, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    repo, revision = model_reference(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(repo, revision=revision, dtype=dtype)
    except (OSError, ValueError) as error:
        raise ModelError(f"cannot load model {name}: {error}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer, model


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
