"""The GPU path: `"backend": "vllm"` runs `vllm serve` as a child and forwards to it.

The child listens on a free loopback port of its own, with runtime LoRA updates allowed
(`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) and the engine's secret as its API key. The front is
the same HTTP server as for the transformers backend, so the control plane sees one contract:
it answers auth, /health, /v1/models, uploads and /trainyard/stats itself, checks request
bodies the same way, keeps the adapter registry (so `adapter_exists`, `too_many_adapters`,
404 after unload and the deferred unload behave the same), and forwards completions, chats,
and adapter loads and unloads to the child; answers and event streams come back byte for byte.
An adapter's unload reaches vLLM only once the front's requests in flight on it are done.

Differences: the prompt's length is checked by vLLM (its 400 comes back as it is); in
/trainyard/stats the token and batch counters stay 0 (vLLM's own /metrics has them).

The secret goes to vLLM in `VLLM_API_KEY`, which `vllm serve` reads when `--api-key` is not
given, rather than on the command line, where every user of the host could read it in `ps`.

Untested here: vLLM is not installed on the machines this was written on. The tests cover the
command line, the environment, and the front forwarding to a stand-in `vllm` executable that
speaks the same HTTP; not vLLM itself.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from engine.config import EngineConfig
from engine.model import AdapterError, ModelError
from engine.registry import Registry

INTERNAL_HOST = "127.0.0.1"
READY_POLL_S = 0.5
TIMEOUT_S = 300.0


def vllm_command(config: EngineConfig, *, port: int) -> list[str]:
    """The child's argv (without the secret: see `vllm_env`)."""
    argv = [
        "vllm",
        "serve",
        config.base_model,
        "--served-model-name",
        config.served_model_name,
        "--enable-lora",
        "--max-loras",
        str(max(config.max_loras, 1)),
        "--max-lora-rank",
        str(config.max_lora_rank),
        "--max-num-seqs",
        str(config.max_batch),
        "--dtype",
        config.dtype,
        "--host",
        INTERNAL_HOST,
        "--port",
        str(port),
    ]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    return argv


def vllm_env(environ: Mapping[str, str], *, secret: str) -> dict[str, str]:
    return {**environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_API_KEY": secret}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((INTERNAL_HOST, 0))
        return sock.getsockname()[1]


class VllmBackend:
    def __init__(self, config: EngineConfig, *, secret: str, registry: Registry) -> None:
        self._registry = registry
        self._secret = secret
        self.port = free_port()
        # Without a tokenizer here the front checks max_tokens against a known limit only.
        self.max_model_len = config.max_model_len or 1 << 30
        registry.on_drained = self.delete_adapter
        try:
            self.child = subprocess.Popen(
                vllm_command(config, port=self.port), env=vllm_env(os.environ, secret=secret)
            )
        except OSError as error:
            raise ModelError(f"cannot start vllm: {error}") from None

    def wait_ready(self) -> None:
        """Until the child answers /health; ModelError if it exits first."""
        while True:
            if self.child.poll() is not None:
                raise ModelError(f"vllm exited with code {self.child.returncode} while starting")
            try:
                connection, response = self.request("GET", "/health", None, timeout=2)
                connection.close()
                if response.status == 200:
                    return
            except OSError:
                pass
            time.sleep(READY_POLL_S)

    def request(
        self, method: str, path: str, body: bytes | None, *, timeout: float = TIMEOUT_S
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send one request to the child; the caller reads the response and closes."""
        connection = http.client.HTTPConnection(INTERNAL_HOST, self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {self._secret}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=body, headers=headers)
            return connection, connection.getresponse()
        except BaseException:
            connection.close()
            raise

    def _post_json(self, path: str, payload: dict[str, Any]) -> tuple[int, str]:
        connection, response = self.request("POST", path, json.dumps(payload).encode())
        try:
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            connection.close()

    def load_adapter(self, name: str, path: str) -> None:
        try:
            status, text = self._post_json(
                "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}
            )
        except OSError as error:
            raise AdapterError(f"vllm did not answer: {error}") from None
        if status != 200:
            raise AdapterError(f"vllm refused the adapter ({status}): {text[:500]}")

    def delete_adapter(self, name: str) -> None:
        """The registry's `on_drained` hook."""
        try:
            self._post_json("/v1/unload_lora_adapter", {"lora_name": name})
        except OSError as error:
            print(f"engine: unloading {name} from vllm failed: {error}", flush=True)
        self._registry.forget(name)

    def start_threads(self) -> None:
        pass

    def alive(self) -> bool:
        return self.child.poll() is None

    def stop(self, timeout: float) -> None:
        if self.child.poll() is None:
            self.child.terminate()
        deadline = time.monotonic() + timeout
        try:
            self.child.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
