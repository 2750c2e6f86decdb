"""Trainer overhead: training tokens/s of `python -m trainer` ÷ a bare transformers + peft loop.

Both train the tiny random Llama of `trainer.tiny` with the same LoRA adapter on the alpaca demo
rows of `trainer.demo_data`, for the same number of steps, on the CPU, in this run:

- **trainer**: a real `python -m trainer` process (its own interpreter, cwd the repository,
  `TRAINYARD_CHECKPOINT_DIR` a temporary directory, `save_steps` past the last step so nothing
  is saved mid-run). Its rate is the median of the `tokens_per_s` of its `metrics` lines after
  the warm-up steps: non-padding tokens of the step over the time since the previous log, so
  everything `Trainer` does per step (data loader, collator, callbacks, logging, the JSON line)
  is in it; process start, model load and both gradings are not.
- **bare**: in this process, `AutoModelForCausalLM` + `peft.get_peft_model` with the trainer's
  LoRA settings (r, alpha, dropout and target modules read from `trainer.config.TrainConfig`
  and `trainer.train.LORA_TARGETS`), the trainer's own `Encoder`, `encode_and_split` and
  `Collator` (so the examples and batches are identical, in a shuffled order of its own),
  `torch.optim.AdamW` with the same learning rate, the same linear decay and gradient clipping
  at 1.0 that `Trainer` applies by default; per step: collate, forward, backward, clip, step,
  zero. Its rate is the median over steps after the warm-up of that step's non-padding tokens
  over its time. It runs before and after the trainer process; both are printed.

    .venv/bin/python bench/bench_trainer.py     # BENCH_TRAINER_STEPS=200, BENCH_TRAINER_WARMUP=10

Reported, no target. Under a minute on two cores.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = int(os.environ.get("BENCH_TRAINER_STEPS", "200"))
WARMUP = int(os.environ.get("BENCH_TRAINER_WARMUP", "10"))


def trainer_run(model: Path, dataset: Path, checkpoints: Path) -> tuple[list[float], float]:
    """Per-step tokens/s from the trainer's metric lines (after warm-up), and the process's
    wall time."""
    config = {
        "model": str(model),
        "dataset": str(dataset),
        "dataset_format": "alpaca",
        "max_steps": STEPS,
        "save_steps": STEPS + 1000,
    }
    env = dict(os.environ, TRAINYARD_CHECKPOINT_DIR=str(checkpoints))
    env.pop("TRAINYARD_RESUME_FROM", None)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "--config-json", json.dumps(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"python -m trainer exited {result.returncode}:\n{result.stderr[-3000:]}")
    rates = []
    for line in result.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("type") == "metrics" and event["step"] > WARMUP and event.get("tokens_per_s"):
            rates.append(float(event["tokens_per_s"]))
    if len(rates) != STEPS - WARMUP:
        sys.exit(f"expected {STEPS - WARMUP} metric lines after warm-up, got {len(rates)}")
    return rates, wall


def bare_run(model_path: Path, dataset: Path) -> list[float]:
    """Per-step tokens/s of a plain loop (after warm-up)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup

    from trainer.batching import Collator
    from trainer.config import TrainConfig
    from trainer.data import Encoder, encode_and_split, read_samples
    from trainer.train import LORA_TARGETS

    config = TrainConfig(model=str(model_path), dataset=str(dataset))
    torch.manual_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    encoder = Encoder(
        tokenizer,
        max_length=min(config.max_length, model.config.max_position_embeddings),
        vocab_size=model.get_input_embeddings().num_embeddings,
    )
    samples = read_samples(str(dataset), "alpaca")
    train = encode_and_split(
        samples, encoder, eval_fraction=config.eval_fraction, seed=config.seed
    ).train
    model = get_peft_model(
        model,
        LoraConfig(
            task_type="CAUSAL_LM",
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(LORA_TARGETS[model.config.model_type]),
        ),
    )
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    schedule = get_linear_schedule_with_warmup(optimizer, 0, STEPS)
    collate = Collator(tokenizer.pad_token_id)
    rng = random.Random(config.seed)

    def batches():
        while True:
            order = list(range(len(train)))
            rng.shuffle(order)
            for start in range(0, len(order), config.batch_size):
                yield [train[i] for i in order[start : start + config.batch_size]]

    rates = []
    source = batches()
    for step in range(1, STEPS + 1):
        started = time.perf_counter()
        batch = collate(next(source))
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        loss.item()
        elapsed = time.perf_counter() - started
        if step > WARMUP:
            rates.append(int(batch["attention_mask"].sum()) / elapsed)
    return rates


def main() -> None:
    import torch
    from transformers.utils.logging import disable_progress_bar, set_verbosity_error

    from trainer.demo_data import write_demo_datasets
    from trainer.tiny import build_tiny_model

    disable_progress_bar()
    set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        tmp = Path(tmp)
        model = build_tiny_model(tmp / "model")
        dataset = write_demo_datasets(tmp / "data")["alpaca"]
        threads = torch.get_num_threads()
        print(f"{STEPS} steps, median over steps {WARMUP + 1} to {STEPS}, torch threads {threads}")

        bare_before = bare_run(model, dataset)
        trainer_rates, wall = trainer_run(model, dataset, tmp / "checkpoints")
        bare_after = bare_run(model, dataset)

    trainer_median = statistics.median(trainer_rates)
    bare_median = statistics.median(bare_before + bare_after)
    print(f"trainer (python -m trainer):   {trainer_median:9,.0f} tokens/s  (process {wall:.1f} s)")
    print(f"bare loop, before the trainer: {statistics.median(bare_before):9,.0f} tokens/s")
    print(f"bare loop, after the trainer:  {statistics.median(bare_after):9,.0f} tokens/s")
    print(f"ratio trainer / bare (both bare runs): {trainer_median / bare_median:.2f}")
    print(
        "excluded from both: interpreter start, imports, model load, tokenizing, the trainer's "
        "two gradings and final save; the trainer's rate includes Trainer's per-step "
        "machinery (data loader, callbacks, logging, one JSON line a step)"
    )


if __name__ == "__main__":
    main()
