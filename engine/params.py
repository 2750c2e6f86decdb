"""Reading the bodies of `/v1/completions`, `/v1/chat/completions` and the adapter calls.

Every function here is pure and raises `ApiError` 400 `invalid_request` with `param` naming the
field, for a wrong type or an out-of-range number; fields this engine does not read (`user`,
`presence_penalty`, ...) are ignored, as vLLM ignores what it does not know, except those whose
meaning would silently change the answer (`n` other than 1, `logprobs`, `echo`, `best_of`,
`suffix`), which are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import is_number, valid_name
from engine.errors import invalid

DEFAULT_MAX_TOKENS = 16
MAX_STOPS = 4
CHAT_ROLES = ("system", "user", "assistant")
# torch.Generator.manual_seed takes this range.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float  # 0: greedy
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    ignore_eos: bool  # vLLM's extra: generate max_tokens whatever the model says


@dataclass(frozen=True)
class Generation:
    """One completion or chat request, checked; the prompt is not tokenized yet."""

    chat: bool
    model: str
    prompt: str  # "" for chat
    messages: tuple[tuple[str, str], ...]  # (role, content); () for a completion
    sampling: Sampling
    stream: bool
    include_usage: bool


def parse_completion(body: dict[str, Any], *, max_model_len: int) -> Generation:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise invalid("'prompt' must be a string, or a list holding exactly one string", "prompt")
    return _generation(body, chat=False, prompt=prompt, messages=(), max_model_len=max_model_len)


def parse_chat(body: dict[str, Any], *, max_model_len: int) -> Generation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of messages", "messages")
    parsed = tuple(_message(item, index) for index, item in enumerate(messages))
    return _generation(body, chat=True, prompt="", messages=parsed, max_model_len=max_model_len)


def _message(item: object, index: int) -> tuple[str, str]:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise invalid(f"'{where}' must be an object with 'role' and 'content'", where)
    role = item.get("role")
    if role not in CHAT_ROLES:
        raise invalid(f"'{where}.role' must be one of {', '.join(CHAT_ROLES)}", f"{where}.role")
    content = item.get("content")
    if isinstance(content, list):  # OpenAI's content parts; only text ones are meaningful here
        if not all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        ):
            raise invalid(f"'{where}.content' may hold only text parts", f"{where}.content")
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise invalid(f"'{where}.content' must be a string", f"{where}.content")
    return role, content


def _generation(
    body: dict[str, Any],
    *,
    chat: bool,
    prompt: str,
    messages: tuple[tuple[str, str], ...],
    max_model_len: int,
) -> Generation:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' must be a non-empty string", "model")
    _refuse_unsupported(body)
    stream = _optional(body, "stream", bool, False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("'stream_options' must be an object", "stream_options")
    include_usage = _optional(options or {}, "include_usage", bool, False, "stream_options.")
    return Generation(
        chat=chat,
        model=model,
        prompt=prompt,
        messages=messages,
        sampling=_sampling(body, chat=chat, max_model_len=max_model_len),
        stream=stream,
        include_usage=include_usage,
    )


def _sampling(body: dict[str, Any], *, chat: bool, max_model_len: int) -> Sampling:
    # The chat API's newer name for max_tokens (the openai package sends either).
    name = (
        "max_completion_tokens"
        if chat and body.get("max_completion_tokens") is not None
        else "max_tokens"
    )
    max_tokens = body.get(name)
    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, max_model_len - 1)
    elif not _is_int(max_tokens) or not 1 <= max_tokens <= max_model_len:
        raise invalid(f"'{name}' must be a whole number from 1 to {max_model_len}", name)

    temperature = body.get("temperature")
    if temperature is None:
        temperature = 1.0
    elif not is_number(temperature) or not 0 <= temperature <= 2:
        raise invalid("'temperature' must be a number from 0 to 2", "temperature")

    top_p = body.get("top_p")
    if top_p is None:
        top_p = 1.0
    elif not is_number(top_p) or not 0 < top_p <= 1:
        raise invalid("'top_p' must be a number greater than 0 and at most 1", "top_p")

    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOPS
        or not all(isinstance(item, str) and item for item in stop)
    ):
        raise invalid(
            f"'stop' must be a non-empty string or a list of up to {MAX_STOPS} of them", "stop"
        )

    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not SEED_MIN <= seed <= SEED_MAX):
        raise invalid("'seed' must be a whole number that fits in 64 bits", "seed")

    return Sampling(
        max_tokens=max_tokens,
        temperature=float(temperature),
        top_p=float(top_p),
        stop=tuple(stop),
        seed=seed,
        ignore_eos=_optional(body, "ignore_eos", bool, False),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (n != 1 or isinstance(n, bool)):
        raise invalid("only 'n': 1 is supported", "n")
    best_of = body.get("best_of")
    if best_of is not None and (best_of != 1 or isinstance(best_of, bool)):
        raise invalid("only 'best_of': 1 is supported", "best_of")
    for name in ("logprobs", "top_logprobs", "echo", "suffix"):
        if body.get(name) not in (None, False):
            raise invalid(f"'{name}' is not supported by this engine", name)


def parse_load(body: dict[str, Any], *, base_name: str) -> tuple[str, str]:
    """`(lora_name, lora_path)` of a load request."""
    name = parse_unload(body)
    if name == base_name:
        raise invalid(
            f"'lora_name' must differ from the base model's name {base_name!r}", "lora_name"
        )
    path = body.get("lora_path")
    if not isinstance(path, str) or not path:
        raise invalid("'lora_path' must be a non-empty string", "lora_path")
    return name, path


def parse_unload(body: dict[str, Any]) -> str:
    name = body.get("lora_name")
    if not valid_name(name):
        raise invalid("'lora_name' must match [A-Za-z0-9._-]{1,100}", "lora_name")
    return name


def _optional(body: dict[str, Any], name: str, kind: type, default: Any, prefix: str = "") -> Any:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise invalid(f"'{prefix}{name}' must be a {kind.__name__}", prefix + name)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
