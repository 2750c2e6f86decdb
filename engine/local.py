"""The transformers backend: the model, its scheduler thread and the registry, wired together.

`start` turns a checked request body into a queued `Request`: the prompt is tokenized on the
caller's thread, its length checked, and the request counted in flight (`Registry.acquire`)
before it is queued; from then on `Request.end` releases it, however it ends. Adapter loads and
deletions run on the scheduler thread (`Scheduler.call`).
"""

from __future__ import annotations

import sys
from concurrent.futures import CancelledError, Future

from engine.config import EngineConfig
from engine.errors import ApiError, invalid, model_not_found
from engine.model import CHAT_END, Model
from engine.params import Generation
from engine.registry import Registry
from engine.scheduler import Request, Scheduler


class LocalBackend:
    def __init__(self, config: EngineConfig, registry: Registry) -> None:
        self._registry = registry
        self.model = Model(config, count_token=lambda: registry.count_tokens(1))
        self.max_model_len = self.model.max_model_len
        self.scheduler = Scheduler(
            self.model, max_batch=config.max_batch, on_batch=registry.count_batch
        )
        registry.on_drained = self.delete_adapter

    def start(self, generation: Generation) -> Request:
        """Queue `generation`; 404 for a model not served, 400 for a prompt that is empty or
        leaves no room for max_tokens within max_model_len."""
        if not self._registry.served(generation.model):
            raise model_not_found(generation.model)
        model, sampling = self.model, generation.sampling
        param = "messages" if generation.chat else "prompt"
        if generation.chat:
            ids = model.encode_chat(generation.messages)
        else:
            ids = model.encode_completion(generation.prompt)
        if not ids:
            raise invalid("the prompt is empty", param)
        room = self.max_model_len - sampling.max_tokens
        if len(ids) > room:
            raise invalid(
                f"the prompt is {len(ids)} tokens, and with max_tokens {sampling.max_tokens} "
                f"at most {room} fit in max_model_len {self.max_model_len}",
                param,
            )
        adapter = self._registry.acquire(generation.model)
        request = Request(
            adapter=adapter,
            prompt_ids=ids,
            sampling=sampling,
            stop_token_ids=model.chat_stop_ids if generation.chat else model.stop_ids,
            hidden_stops=(CHAT_END,) if generation.chat else (),
            on_end=lambda cancelled: self._registry.release(adapter, cancelled=cancelled),
        )
        try:
            self.scheduler.submit(request)
        except ApiError:
            self._registry.release(adapter)
            raise
        return request

    def load_adapter(self, name: str, path: str) -> None:
        """Load on the scheduler thread, between batches; raises AdapterError."""
        future = self.scheduler.call(lambda: self.model.load_adapter(name, path))
        try:
            future.result()
        except CancelledError:
            raise ApiError(503, "shutting_down", "the engine is shutting down") from None

    def delete_adapter(self, name: str) -> None:
        """The registry's `on_drained` hook: delete the weights, then free the name."""

        def forget(done: Future) -> None:
            if not done.cancelled() and done.exception() is not None:
                print(
                    f"engine: deleting adapter {name} failed: {done.exception()}", file=sys.stderr
                )
            self._registry.forget(name)

        self.scheduler.call(lambda: self.model.delete_adapter(name)).add_done_callback(forget)

    def start_threads(self) -> None:
        self.scheduler.start()

    def stop(self, timeout: float) -> None:
        self.scheduler.stop(timeout)
