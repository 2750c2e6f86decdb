"""The answers and stream chunks of the OpenAI API, as vLLM's server writes them.

A completion's id is `cmpl-<hex>`, a chat's `chatcmpl-<hex>`; every chunk of one stream shares
its id, `created` and `model`. A stream is: for a chat, a first chunk with the assistant role
and empty content; one chunk per text delta; a last chunk with an empty delta or text and the
`finish_reason`; then, when asked (`stream_options.include_usage`), one chunk with no choices
and the usage; then `[DONE]`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass
class Shapes:
    """The shapes of one answer: a completion's or a chat's, for `model`."""

    chat: bool
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.id = self.id or ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def answer(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        """The whole answer of a request that did not stream."""
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
            return {**self._head("chat.completion"), "choices": [choice], "usage": tokens}
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        return {**self._head("text_completion"), "choices": [choice], "usage": tokens}

    def first_chunk(self) -> dict[str, Any] | None:
        """A chat stream's opening chunk (the role); None for a completion."""
        if not self.chat:
            return None
        return self._chunk({"role": "assistant", "content": ""}, None)

    def delta_chunk(self, text: str) -> dict[str, Any]:
        return self._chunk({"content": text} if self.chat else text, None)

    def last_chunk(self, finish_reason: str) -> dict[str, Any]:
        return self._chunk({} if self.chat else "", finish_reason)

    def usage_chunk(self, tokens: dict[str, int]) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(kind), "choices": [], "usage": tokens}

    def _chunk(self, delta: Any, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**self._head("text_completion"), "choices": [choice]}
