"""Serving through Trainyard's OpenAI-compatible proxy against straight to the engine: tokens
per second of a streamed completion, and time to first token.

- The stack (web, worker, beat) runs with production timings on its own database
  (`trainyard_bench_serving`) and Redis database (`BENCH_SERVING_REDIS_URL`, default 12).
- A tiny Llama is built and one LoRA adapter trained by the real trainer (`tests/adapters.py`),
  stored as a completed fine-tune's artifact; an endpoint serves it as a real serve job on
  the local provider.
- Each repetition streams the same request twice, interleaved: through the proxy
  (`/v1/completions` with an API key, `model` = the endpoint's name) and straight to the
  engine (its secret, `model` = the revision's served name). Sampling is seeded, so both
  produce the same tokens. Tokens/s = completion tokens ÷ (last event - request sent); time
  to first token = first text event - request sent. Medians of `BENCH_SERVING_REPS` (9).
- Targets: proxy ÷ direct tokens/s ≥ 0.9; time to first token reported (proxy ÷ direct).

    .venv/bin/python bench/bench_serving.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from live_stack import production_stack, setup_django, stop_runners, terminate_unfinished

BENCH_DB = "trainyard_bench_serving"
REDIS_URL = os.environ.get("BENCH_SERVING_REDIS_URL", "redis://127.0.0.1:6379/13")
REPS = int(os.environ.get("BENCH_SERVING_REPS", 9))
MAX_TOKENS = int(os.environ.get("BENCH_SERVING_TOKENS", 128))


def stream(url: str, headers: dict, body: dict) -> tuple[float, float, int]:
    """(seconds to the first text, seconds to the end, completion tokens) of one stream."""
    import httpx

    sent = time.perf_counter()
    first = None
    tokens = 0
    with httpx.stream("POST", url, headers=headers, json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if first is None and data.get("choices") and data["choices"][0].get("text"):
                first = time.perf_counter() - sent
            if data.get("usage"):
                tokens = data["usage"]["completion_tokens"]
    return first or 0.0, time.perf_counter() - sent, tokens


def main() -> int:
    setup_django(BENCH_DB, REDIS_URL)
    import httpx
    import redis
    from django.conf import settings

    from apps.accounts import services as account_services
    from apps.jobs.models import Attempt
    from apps.serving.kind import engine_secret
    from apps.serving.models import Endpoint
    from tests.adapters import train_adapters
    from tests.factories import OrganizationFactory, ProjectFactory
    from tests.integration.stack import wait_for
    from tests.serving.fixtures import finished_finetune
    from trainer.demo_data import write_demo_datasets
    from trainer.tiny import build_tiny_model

    redis.Redis.from_url(REDIS_URL).flushdb()
    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    model = build_tiny_model(scratch / "model")
    adapters = train_adapters(scratch / "adapters", model, write_demo_datasets(scratch / "data"))
    (scratch / "stack").mkdir()
    stack = production_stack(BENCH_DB, REDIS_URL, scratch / "stack")
    stack.start()
    try:
        settings.MEDIA_ROOT = stack.workdir / "var" / "media"
        org = OrganizationFactory(slug="bench-serving", compute_enabled=True)
        project = ProjectFactory(organization=org)
        tuned = finished_finetune(project=project, tiny_model=model, adapter_dir=adapters["a"])
        _, key = account_services.api_key_create(organization=org, name="bench")
        auth = {"Authorization": f"Bearer {key}"}
        created = httpx.post(
            f"{stack.url}/api/v1/endpoints",
            headers=auth,
            json={
                "name": "bench",
                "project": project.public_id,
                "base_model": str(model),
                "target": {"job": tuned.job.public_id},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        endpoint_id = created.json()["id"]
        wait_for(
            lambda: (
                httpx.get(
                    f"{stack.url}/api/v1/endpoints/{endpoint_id}", headers=auth, timeout=10
                ).json()["state"]
                == "ready"
            ),
            timeout=180,
            what="the endpoint to be ready",
        )
        endpoint = Endpoint.objects.select_related("job", "current_revision").get(
            public_id=endpoint_id
        )
        attempt = Attempt.objects.get(job=endpoint.job, number=endpoint.job.attempt_count)
        engine = f"http://127.0.0.1:{attempt.service_port}"
        direct_auth = {"Authorization": f"Bearer {engine_secret(attempt)}"}
        body = {
            "prompt": "Once upon a time",
            "max_tokens": MAX_TOKENS,
            "temperature": 1.0,
            "seed": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        proxied_body = {**body, "model": "bench"}
        direct_body = {**body, "model": endpoint.current_revision.served_name}
        for _ in range(2):  # warm both paths
            stream(f"{stack.url}/v1/completions", auth, proxied_body)
            stream(f"{engine}/v1/completions", direct_auth, direct_body)
        proxied, direct = [], []
        for _ in range(REPS):
            proxied.append(stream(f"{stack.url}/v1/completions", auth, proxied_body))
            direct.append(stream(f"{engine}/v1/completions", direct_auth, direct_body))
        assert {run[2] for run in proxied} == {run[2] for run in direct}, (proxied, direct)
        tokens = proxied[0][2]
        rate_proxied = statistics.median(run[2] / run[1] for run in proxied)
        rate_direct = statistics.median(run[2] / run[1] for run in direct)
        ttft_proxied = statistics.median(run[0] for run in proxied) * 1000
        ttft_direct = statistics.median(run[0] for run in direct) * 1000
        print(f"streamed completion of {tokens} tokens, median of {REPS}, interleaved")
        print(
            f"tokens/s: proxy {rate_proxied:.1f}, direct {rate_direct:.1f}, "
            f"ratio {rate_proxied / rate_direct:.3f} (target >= 0.9)"
        )
        print(
            f"time to first token: proxy {ttft_proxied:.1f} ms, direct {ttft_direct:.1f} ms, "
            f"ratio {ttft_proxied / ttft_direct:.2f} (+{ttft_proxied - ttft_direct:.1f} ms)"
        )
        return 0
    finally:
        from apps.jobs import services as job_services
        from apps.jobs.models import Job

        terminate_unfinished(
            lambda job_id: job_services.job_terminate(job=Job.objects.get(public_id=job_id))
        )
        stack.stop()
        stop_runners()


if __name__ == "__main__":
    sys.exit(main())
