"""A client that hangs up: its request is cancelled within well under a second, streaming or
not, and the tokens generated for it stop."""

from __future__ import annotations

import json
import socket
import time

import httpx

from tests.live import wait_until

LONG = {"model": "a", "prompt": "x", "max_tokens": 500, "ignore_eos": True, "temperature": 0}


def _gone_within_a_second(engine, before: dict, hung_up_at: float) -> dict:
    wait_until(
        lambda: engine.stats()["cancelled_total"] == before["cancelled_total"] + 1,
        timeout=1.0,
        interval=0.01,
        what="the request cancelled",
    )
    cancelled_after = time.monotonic() - hung_up_at
    assert cancelled_after < 1.0
    stopped = engine.stats()
    time.sleep(0.3)
    later = engine.stats()
    assert later["generated_tokens_total"] == stopped["generated_tokens_total"]
    assert later["requests_in_flight"] == 0
    assert later["adapters"]["a"]["in_flight"] == 0
    assert stopped["generated_tokens_total"] - before["generated_tokens_total"] < LONG["max_tokens"]
    return later


def test_hanging_up_on_a_stream_stops_its_generation(served):
    before = served.stats()
    with httpx.stream(
        "POST",
        f"{served.url}/v1/completions",
        json={**LONG, "stream": True},
        headers=served.headers,
        timeout=30,
    ) as response:
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
        assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
    hung_up_at = time.monotonic()

    _gone_within_a_second(served, before, hung_up_at)


def test_hanging_up_while_waiting_for_a_whole_answer_stops_it_too(served):
    before = served.stats()
    body = json.dumps(LONG).encode()
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: engine\r\n"
            + f"Authorization: Bearer {served.secret}\r\n".encode()
            + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until(
            lambda: served.stats()["generated_tokens_total"] > before["generated_tokens_total"],
            interval=0.005,
            what="generation to start",
        )
    hung_up_at = time.monotonic()

    _gone_within_a_second(served, before, hung_up_at)
