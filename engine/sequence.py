"""One row of a batch: the tokens it takes, the text it sends, and when it is finished.

The model's decode loop calls `push` with each token sampled for the row and drops the row
once `push` answers False. Everything the request's client sees goes through here: text deltas
as soon as they are complete (`engine.text`), then one `Finished` with the finish reason and
the token counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.scheduler import Finished, Request
from engine.text import IncrementalDecoder, StopMatcher


class Sequence:
    def __init__(
        self,
        request: Request,
        *,
        decode: Callable[[list[int]], str],
        count_token: Callable[[], None],
        generator: Any = None,  # a torch.Generator for a seeded request
    ) -> None:
        self.request = request
        self.sampling = request.sampling
        self.generator = generator
        self._count_token = count_token
        self._decoder = IncrementalDecoder(decode, request.prompt_ids)
        self._stops = StopMatcher(request.sampling.stop + request.hidden_stops)
        self._completion_tokens = 0

    @property
    def live(self) -> bool:
        """False once finished, cancelled or aborted: its row is dropped from the batch."""
        return not self.request.finished

    def push(self, token_id: int) -> bool:
        """Take the row's next token; False once the row is finished."""
        request = self.request
        if request.finished:
            return False
        self._completion_tokens += 1
        self._count_token()
        if token_id in request.stop_token_ids and not self.sampling.ignore_eos:
            self._send(self._stops.feed(self._decoder.flush()))
            self._send(self._stops.flush())
            return self._finish("stop")
        self._send(self._stops.feed(self._decoder.push(token_id)))
        if self._stops.stopped:
            return self._finish("stop")
        if self._completion_tokens >= self.sampling.max_tokens:
            self._send(self._stops.feed(self._decoder.flush()))
            if self._stops.stopped:
                return self._finish("stop")
            self._send(self._stops.flush())
            return self._finish("length")
        return True

    def _send(self, text: str) -> None:
        self.request.emit(text)

    def _finish(self, reason: str) -> bool:
        self.request.end(Finished(reason, len(self.request.prompt_ids), self._completion_tokens))
        return False
