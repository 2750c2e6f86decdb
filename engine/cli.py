"""The command line: `python -m engine --config-json JSON`.

Exit codes: 0 after SIGTERM, SIGINT or SIGUSR1 (they all mean: stop accepting, end the
streams in flight, exit), also when one arrives while the model is still loading; 2 for
unusable input (a bad config, no `$TRAINYARD_SERVE_SECRET`, a model that cannot be loaded, a
port that cannot be bound), with one line on stderr; 1 for an unexpected error, or when the
vLLM child exits under a running engine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from engine.config import ConfigError, EngineConfig, load_config
from runner.protocol import ENV_SERVE_SECRET, ENV_SERVICE_PORT, LINE_SERVING

INPUT_ERROR_EXIT_CODE = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
DRAIN_S = 1.0  # how long in-flight streams get to end once a stop signal came


def fail(message: str) -> None:
    print(f"engine: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine", description="Serve a causal LM and its LoRA adapters over HTTP."
    )
    parser.add_argument("--config-json", metavar="JSON", required=True, help="the JSON config")
    args = parser.parse_args(argv)  # exits 2 on a bad command line
    try:
        config = load_config(args.config_json)
    except ConfigError as error:
        fail(str(error))
        return INPUT_ERROR_EXIT_CODE
    secret = os.environ.get(ENV_SERVE_SECRET, "").strip()
    if not secret:
        fail(f"${ENV_SERVE_SECRET} is not set: every request must carry that secret")
        return INPUT_ERROR_EXIT_CODE

    # Plain values, not threading.Event: a handler runs on the main thread, which may be
    # inside Event.wait() holding the event's lock, and Event.set() would then wait forever.
    serving: list[bool] = []
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if not serving:
            raise SystemExit(0)  # still loading: nothing is in flight yet
        stopping.append(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    return _serve(config, secret, serving, stopping)


def listen_address(config: EngineConfig, environ: Mapping[str, str]) -> tuple[str, int]:
    """Where the engine listens: the config's address, unless the backend published a port
    of the workload's own network to its host (a container: $TRAINYARD_SERVICE_PORT) and the
    config asks for any port; then that port on every address of that network, which only
    the published port reaches from outside."""
    published = environ.get(ENV_SERVICE_PORT, "").strip()
    if config.port == 0 and published.isascii() and published.isdigit():
        return "0.0.0.0", int(published)
    return config.host, config.port


def _serve(config: EngineConfig, secret: str, serving: list[bool], stopping: list[int]) -> int:
    from engine.model import ModelError
    from engine.registry import Registry
    from engine.server import App, log, make_server

    host, port = listen_address(config, os.environ)
    try:
        # Bound before the model loads, so a taken port fails at once; connections wait in
        # the listen queue until serve_forever.
        server = make_server(host, port)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}")
        return INPUT_ERROR_EXIT_CODE
    registry = Registry(
        base_name=config.served_model_name, base_root=config.base_model, max_loras=config.max_loras
    )
    # torch's and transformers' imports and the model's load make about a million objects
    # that live as long as the engine: the cyclic collector, left on, walks them again and
    # again meanwhile (a sixth of the imports' CPU). Off for the load, then they are frozen
    # out of its reach and it runs for what requests make.
    gc.disable()
    try:
        backend = _backend(config, secret, registry)
    except ModelError as error:
        fail(str(error))
        return INPUT_ERROR_EXIT_CODE
    finally:
        gc.freeze()
        gc.enable()
    if config.backend == "vllm":
        try:
            backend.wait_ready()
        except ModelError as error:
            fail(str(error))
            backend.stop(DRAIN_S)
            return INPUT_ERROR_EXIT_CODE
        except SystemExit:  # a stop signal while vllm starts: it must not outlive us
            backend.stop(DRAIN_S)
            raise

    server.app = App(
        config=config,
        secret=secret.encode(),
        registry=registry,
        backend=backend,
        forwarding=config.backend == "vllm",
    )
    backend.start_threads()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    serving.append(True)
    port = server.server_address[1]
    log(json.dumps({"type": LINE_SERVING, "port": port, "models": [config.served_model_name]}))

    exit_code = 0
    while not stopping:
        time.sleep(0.05)  # a signal cuts the sleep short only to run its handler
        if config.backend == "vllm" and not backend.alive():
            fail("vllm exited")
            exit_code = 1
            break
    server.shutdown()
    server.server_close()
    backend.stop(DRAIN_S)  # ends every request in flight: their streams get their last event
    server.app.wait_idle(DRAIN_S)
    log("engine: stopped")
    return exit_code


def _backend(config: EngineConfig, secret: str, registry):
    if config.backend == "vllm":
        from engine.vllm import VllmBackend

        return VllmBackend(config, secret=secret, registry=registry)
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    if threads:
        import torch

        # torch and OpenMP ignore a value they cannot read, and so does this.
        with contextlib.suppress(ValueError):
            torch.set_num_threads(max(int(threads), 1))
    from engine.local import LocalBackend

    return LocalBackend(config, registry)
