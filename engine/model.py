"""The base model, its LoRA adapters, and the batched decode loop (transformers and peft).

- Prompts are tokenized as the trainer tokenizes what it trains on (`trainer.data.Encoder`): a
  completion's prompt is BOS (when the tokenizer has one) plus the prompt's tokens; a chat is
  the tokenizer's chat template when it has one (which writes its own special tokens), else
  the trainer's ChatML rendering, `<|im_start|>role\\ncontent<|im_end|>\\n` per message and
  `<|im_start|>assistant\\n`, after BOS. So an adapter answers as it was trained.
- The base is wrapped in a `PeftModel` when the first adapter is loaded, and unwrapped again
  (`unload`) when the last one is deleted: peft's `PeftModel.forward` fails once its last
  adapter is deleted (it looks up the deleted active adapter's config).
- Every forward of a batch passes peft's per-row `adapter_names` (`"__base__"` for the base's
  rows), so one batch mixes adapters. `set_adapter` is never called: which adapter peft calls
  "active" does not matter when `adapter_names` is given.
- The decode loop runs under `torch.inference_mode()` with the KV cache; rows are left-padded,
  with position ids counted from each row's first real token, and rows that finish are cut
  out of the cache (`batch_select_indices`) so a long row does not carry dead ones along.

Everything but `encode_*` and `decode` runs on the scheduler thread.
"""

from __future__ import annotations

import inspect
import json
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.config import PEFT_BASE_NAME, EngineConfig
from engine.errors import invalid
from engine.scheduler import Request
from engine.sequence import Sequence
from runner.protocol import hub_reference
from trainer.data import CHAT_REPLY_START, CHAT_TURN

CHAT_END = "<|im_end|>"  # ChatML's end of turn: a chat also stops there
DEFAULT_MAX_MODEL_LEN = 2048  # for a config that names no context length
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


class ModelError(Exception):
    """The base model cannot be loaded, or the config does not fit it. The CLI exits 2."""


class AdapterError(Exception):
    """An adapter cannot be loaded; the message says why. Answered as 400."""


class Model:
    def __init__(self, config: EngineConfig, *, count_token: Callable[[], None]) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="peft")
        self._torch = torch
        self._count_token = count_token
        self._tokenizer_lock = threading.Lock()
        dtype = config.dtype if config.dtype == "auto" else getattr(torch, config.dtype)
        try:
            repo, revision = base_model_reference(config.base_model)
            self.tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)
            base = AutoModelForCausalLM.from_pretrained(repo, revision=revision, dtype=dtype)
        except (OSError, ValueError) as error:
            raise ModelError(f"cannot load model {config.base_model}: {error}") from None
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self._base = base.to(self.device).eval()
        self._peft: Any = None  # the PeftModel, once an adapter is loaded
        self.max_model_len = self._max_model_len(config.max_model_len)

        tokenizer = self.tokenizer
        self._bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self._pad = next(
            (i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0
        )
        self._chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.stop_ids = frozenset(self._eos_ids())
        end = tokenizer.get_added_vocab().get(CHAT_END)
        self.chat_stop_ids = self.stop_ids | ({end} if end is not None else set())

        parameters = inspect.signature(base.forward).parameters
        # transformers 5 renamed past_key_values to cache (the old name warns, then goes).
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self._keep_arg = next(
            (name for name in ("logits_to_keep", "num_logits_to_keep") if name in parameters),
            None,
        )

    def _max_model_len(self, wanted: int | None) -> int:
        config = self._base.config
        limit = next(
            (v for k in _LENGTH_KEYS if isinstance(v := getattr(config, k, None), int) and v > 0),
            None,
        )
        if wanted is None:
            return limit or DEFAULT_MAX_MODEL_LEN
        if limit is not None and wanted > limit:
            raise ModelError(f"max_model_len {wanted} is over the model's {limit} positions")
        return wanted

    def _eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id} - {None}
        configured = getattr(getattr(self._base, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif isinstance(configured, list):
            ids.update(i for i in configured if isinstance(i, int))
        return ids

    # -- text ------------------------------------------------------------------------------

    def encode_completion(self, prompt: str) -> list[int]:
        return self._bos + self._ids(prompt)

    def encode_chat(self, messages: tuple[tuple[str, str], ...]) -> list[int]:
        if not self._chat_template:
            text = "".join(CHAT_TURN.format(role=role, content=text) for role, text in messages)
            return self._bos + self._ids(text + CHAT_REPLY_START)
        try:
            with self._tokenizer_lock:
                text = self.tokenizer.apply_chat_template(
                    [{"role": role, "content": content} for role, content in messages],
                    tokenize=False,
                    add_generation_prompt=True,
                )
        except Exception as error:  # templates raise what they like (jinja2 exceptions)
            raise invalid(f"the chat template refused the messages: {error}", "messages") from None
        return self._ids(text)

    def _ids(self, text: str) -> list[int]:
        # Fast tokenizers are not safe to call from several threads at once ("Already
        # borrowed"): handlers encode, the scheduler decodes.
        with self._tokenizer_lock:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    # -- adapters (scheduler thread) ---------------------------------------------------------

    def load_adapter(self, name: str, path: str) -> None:
        """Load the LoRA adapter in directory `path` as `name`; AdapterError if it cannot be,
        with the model as it was."""
        directory = Path(path)
        config_file = directory / "adapter_config.json"
        try:
            adapter_config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise AdapterError(f"cannot read {config_file}: {error}") from None
        if not isinstance(adapter_config, dict) or adapter_config.get("peft_type") != "LORA":
            raise AdapterError(f"{config_file} is not the config of a LoRA adapter")
        if not any((directory / name_).is_file() for name_ in WEIGHT_FILES):
            raise AdapterError(f"{directory} holds no {' or '.join(WEIGHT_FILES)}")

        from peft import PeftModel

        try:
            with self._torch.no_grad():
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self._base, path, adapter_name=name)
                else:
                    self._peft.load_adapter(path, adapter_name=name)
            self._peft.eval()
        except Exception as error:  # peft and torch raise many kinds (shapes, files, keys)
            self._undo_load(name)
            raise AdapterError(f"cannot load the adapter in {path}: {error}") from None

    def delete_adapter(self, name: str) -> None:
        if self._peft is None or name not in self._peft.peft_config:
            return
        if len(self._peft.peft_config) == 1:
            self._base = self._peft.unload()
            self._peft = None
        else:
            self._peft.delete_adapter(name)

    def _undo_load(self, name: str) -> None:
        if self._peft is not None and name in self._peft.peft_config:
            self.delete_adapter(name)
        elif self._peft is None:
            _strip_lora(self._base)  # a first load that failed after injecting its layers

    # -- generation (scheduler thread) --------------------------------------------------------

    def generate(self, requests: list[Request], *, should_stop: Callable[[], bool]) -> None:
        """Decode `requests` as one batch until every row is finished or cancelled, or
        `should_stop()` (the caller then aborts what is left)."""
        torch = self._torch
        rows = [
            Sequence(
                request,
                decode=self.decode,
                count_token=self._count_token,
                generator=(
                    torch.Generator().manual_seed(request.sampling.seed)
                    if request.sampling.seed is not None
                    else None
                ),
            )
            for request in requests
        ]
        width = max(len(request.prompt_ids) for request in requests)
        ids = torch.tensor(
            [[self._pad] * (width - len(r.prompt_ids)) + r.prompt_ids for r in requests],
            device=self.device,
        )
        mask = torch.tensor(
            [[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in requests],
            device=self.device,
        )
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        names = [request.adapter or PEFT_BASE_NAME for request in requests]
        cache = None
        with torch.inference_mode():
            while True:
                output = self._forward(ids, mask, positions, cache, names)
                cache = output[self._cache_arg]
                tokens = self._sample(output.logits[:, -1, :], rows)
                alive = [
                    index
                    for index, (row, token) in enumerate(zip(rows, tokens, strict=True))
                    if row.live and row.push(token)
                ]
                if not alive or should_stop():
                    return
                ids = torch.tensor(tokens, device=self.device)[:, None]
                if len(alive) < len(rows) and hasattr(cache, "batch_select_indices"):
                    keep = torch.tensor(alive, device=self.device)
                    cache.batch_select_indices(keep)
                    ids, mask, positions = ids[keep], mask[keep], positions[keep]
                    rows = [rows[index] for index in alive]
                    names = [names[index] for index in alive]
                # (A cache that cannot drop rows keeps the dead ones: `live` skips them.)
                mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
                positions = positions[:, -1:] + 1

    def _forward(self, ids, mask, positions, cache, names):
        kwargs = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            self._cache_arg: cache,
            "use_cache": True,
        }
        if self._keep_arg:
            kwargs[self._keep_arg] = 1  # the prompt's other logits are never read
        if self._peft is None:
            return self._base(**kwargs)
        return self._peft(**kwargs, adapter_names=names)

    def _sample(self, logits, rows: list[Sequence]) -> list[int]:
        torch = self._torch
        tokens = logits.argmax(dim=-1).tolist()
        for index, row in enumerate(rows):
            sampling = row.sampling
            if sampling.temperature == 0 or not row.live:
                continue
            # On the CPU, where the request's own generator lives: the same seed draws the
            # same tokens whatever else shares the batch.
            probs = torch.softmax(logits[index].float().cpu() / sampling.temperature, dim=-1)
            if sampling.top_p < 1:
                probs, order = probs.sort(descending=True)
                probs[(probs.cumsum(0) - probs) > sampling.top_p] = 0  # the first always stays
                tokens[index] = int(order[torch.multinomial(probs, 1, generator=row.generator)])
            else:
                tokens[index] = int(torch.multinomial(probs, 1, generator=row.generator))
        return tokens


def _strip_lora(model: Any) -> None:
    """Put back the plain layers peft wrapped in `model`, without a PeftModel to do it."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, module.get_base_layer())


def base_model_reference(value: str) -> tuple[str, str | None]:
    """(what `from_pretrained` loads, the revision or None): a hub id may name a revision,
    `<org>/<name>@<revision>`; a local directory is taken whole."""
    if value.startswith(("/", ".", "~")) or Path(value).expanduser().exists():
        return value, None
    return hub_reference(value)
