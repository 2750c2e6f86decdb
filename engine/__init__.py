"""The serving workload: `python -m engine --config-json '<json>'`, an OpenAI-compatible HTTP
server for a base causal LM and its LoRA adapters, in the shape of vLLM's server.

The control plane runs it as a serve job (`apps.serving`), talks to it over loopback HTTP and
proxies its clients' traffic to it. Standard library HTTP plus torch, transformers and peft;
it imports nothing of the project but `runner.protocol`, `runner.artifacts` (the strict
tar.gz extraction) and the trainer's pure modules (`trainer.data` for its ChatML rendering),
and never Django (an import-linter contract holds it to that).

**Starting.** The config (`engine.config`) names `base_model` and optionally
`served_model_name` ("base"), `host`, `port` (0: any), `max_batch`, `max_loras`,
`adapters_dir`, `max_model_len`, `dtype` and `backend`. `$TRAINYARD_SERVE_SECRET` is required
(exit 2 without it); `$OMP_NUM_THREADS` sets torch's threads. Once the model is loaded and the
socket listens, one line goes to stdout: `{"type": "serving", "port": N, "models": ["base"]}`;
then one plain line per request (`engine: POST /v1/completions 200 12.3ms`). SIGTERM, SIGINT
and SIGUSR1 all stop it: no new connections, every request in flight ends (a stream gets an
error event `shutting_down` and `[DONE]`), exit 0 well within two seconds. Exit codes:
`engine.cli`.

**HTTP** (`engine.server`). Every request needs `Authorization: Bearer <secret>`. Endpoints:
`GET /health`, `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (both
stream as server-sent events), `PUT /trainyard/adapters/<name>` (a tar.gz of an adapter
directory, checked against `X-Trainyard-SHA256`, unpacked into `adapters_dir/<name>`; answers
its `lora_path`), `POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter` and
`GET /trainyard/stats`. Every error is `{"error": {"type", "message", "param", "code"}}` with a
stable type (`engine.errors`); request bodies are checked field by field (`engine.params`).

**Adapters** (`engine.registry`). A loaded name is never loaded again while its weights are
resident (`adapter_exists`), and at most `max_loras` are resident (`too_many_adapters`).
Unloading answers at once: new requests for the name get 404, the ones in flight finish with
the weights they started on, and the weights are deleted once the last of them ends.

**Generation** (`engine.scheduler`, `engine.model`, `engine.sequence`, `engine.text`). One
scheduler thread owns the model. Handlers tokenize, count the request in flight and queue it;
the thread takes up to `max_batch` queued requests after a gather window of 5 ms (so requests
sent together share a batch), left-pads them and decodes step by step with the KV cache under
`torch.inference_mode()`, passing peft's per-row `adapter_names` (`"__base__"` for base rows)
on every forward, so one batch mixes adapters and no process-global `set_adapter` switch
exists. Rows finish on their own (EOS, a stop string, max_tokens) and are cut out of the
cache; requests that arrive mid-batch wait for the next one. Text is decoded incrementally
(never half a character) and text that could begin a stop string is held back. A client that
hangs up (seen within 50 ms, streaming or not) cancels its request: its row is dropped at the
next step and `cancelled_total` counts it. Adapter loads and deletions run on the same thread,
between batches. Prompts are tokenized as the trainer tokenized its training data, so a chat
with an adapter trained on ChatML gets the ChatML it learned.

**GPU path** (`engine.vllm`). With `"backend": "vllm"` the engine starts `vllm serve` as a
child on a loopback port of its own, with runtime LoRA updates allowed, and keeps this same
front: auth, uploads, the registry, /v1/models and /trainyard/stats stay here; completions,
chats and adapter loads and unloads are forwarded, answers and streams passed back as they
come. The vLLM path is tested against a stand-in `vllm` executable only, never vLLM itself.
"""
