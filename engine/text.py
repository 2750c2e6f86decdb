"""From generated token ids to the text deltas a stream sends.

`IncrementalDecoder` turns ids into text one token at a time without splitting a multi-byte
character: the text of a window of recent tokens is compared with the text of the same window
less the newest token, and nothing is released while the window's text ends in U+FFFD (the
bytes of a character are not all there yet). The window starts on the last prompt tokens, so
tokenizers that drop a leading space at the start of a decode (SentencePiece) still give the
space of the first generated word. This is the scheme vLLM and TGI use.

`StopMatcher` finds stop strings in the decoded text and holds back any tail that could be the
start of one, so no part of a stop string is ever sent.
"""

from __future__ import annotations

from typing import Any

PROMPT_CONTEXT_TOKENS = 6  # prompt tokens the decode window starts with
# A window still ending in U+FFFD after this many new tokens holds bytes that will never form a
# character (a random model makes such): release them rather than hold the stream up.
MAX_PENDING_TOKENS = 4
REPLACEMENT = "\ufffd"


class IncrementalDecoder:
    """Feed token ids with `push`; the text of each is returned once it is complete.

    Not thread-safe; `decode` is the tokenizer's decode, called under whatever lock the
    caller needs.
    """

    def __init__(self, decode: Any, prompt_ids: list[int]) -> None:
        self._decode = decode
        self._ids = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self._prefix = 0  # the window starts here
        self._read = len(self._ids)  # and its text up to here was released

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        pending = len(self._ids) - self._read
        if len(text) <= len(prefix_text) or (
            text.endswith(REPLACEMENT) and pending < MAX_PENDING_TOKENS
        ):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(prefix_text) :]

    def flush(self) -> str:
        """Whatever is held back (ending in U+FFFD), at the end of the sequence."""
        if self._read == len(self._ids):
            return ""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return text[len(prefix_text) :]


class StopMatcher:
    """Feed text with `feed`; it answers what may be sent now, and whether a stop string was
    reached (the text up to it is then all there is)."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._longest = max((len(stop) for stop in self._stops), default=0)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped or not text:
            return ""
        if not self._stops:
            return text
        held = self._held + text
        found = [index for stop in self._stops if (index := held.find(stop)) >= 0]
        if found:
            self.stopped = True
            self._held = ""
            return held[: min(found)]
        keep = self._hold_back(held)
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep]

    def flush(self) -> str:
        """The held-back tail, when the sequence ends without reaching a stop string."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _hold_back(self, text: str) -> int:
        """The length of the longest tail of `text` that starts some stop string."""
        for length in range(min(len(text), self._longest - 1), 0, -1):
            tail = text[-length:]
            if any(stop.startswith(tail) for stop in self._stops):
                return length
        return 0
