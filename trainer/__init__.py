"""The built-in LoRA fine-tune workload: `python -m trainer --config-json '<json>'`.

It reads a dataset in one of six formats, trains a LoRA adapter with Hugging Face `Trainer`
and `peft`, and speaks to the control plane through stdout: one JSON object per line, each
flushed as it is written (see `trainer.events`). Exit codes are in `trainer.cli`.

Importing this package is cheap: torch and transformers are imported only when training
starts, so a bad config or dataset fails in well under a second.
"""
