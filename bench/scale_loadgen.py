"""A load generator that plays the runner of many attempts at once, over HTTP, for
`bench_scale.py`. It is not the runner (`runner/`): it runs no workload; it speaks the same
protocol (docs/runner-protocol.md) the way the runner does, for thousands of attempts from one
asyncio process.

How attempts reach it: the bench's provider is a local (host runtime) provider whose
`python` is a small shell script (`SHIM`). Dispatch launches that script exactly as it would
launch the runner (detached process group, token in a 0600 file); the script reads and
deletes the token, writes `<job id> <token>` into this generator's FIFO and becomes `sleep`,
so the backend's poll sees a live process until the attempt ends. For each such line the
generator plays the runner:

- `GET spec`, `POST started`;
- a log line every `--line-s` seconds (`tick N`), batched as the runner batches
  (`--quiet-every K`: every K-th attempt prints nothing, like a job loading a model or
  between epochs, so it heartbeats on schedule: the heartbeats the bench times)
  (`log_batch_max_interval_s` after a batch's first line; one batch in flight at a time,
  so a slow answer makes the next batch bigger, as the runner's backlog does);
- a heartbeat every `heartbeat_interval_s` (the spec's), or `--heartbeat-s`, put off
  while log batches are answered with an order (each such answer is a heartbeat's), as
  the runner does; `--always-heartbeat` beats on schedule regardless, as runners did
  before; an order to terminate, in either answer, ends the attempt with exit 143;
- like the runner, a new connection per request, and a 5xx or a failed connection is
  retried with the runner's backoff (spec, started, log batches, exit; a heartbeat is
  just sent again at its next interval), counted in `errors` each time.

With `--relay-hosts H` the attempts are spread over H hosts, each with a host relay
(`runner.relay`) played here as it works: the attempts' log batches and heartbeats wait in
their host's two lanes, each of which sends to `POST relay` one bundle at a time
(everything that waited while the last one was out, up to 500 entries, gzipped from 32 kB;
heartbeats to `relay?calls=heartbeat`), each on a fresh connection; a round trip is then
what the runner sees, relay wait included. A bundle of batches leaves at most every
`--batch-interval-ms` (200, the relay's default; 0: as soon as the last is back).
`--one-lane` plays the relay as it was before heartbeats had a lane of their own: they wait
in the batches' queue.

It records, per request kind, the round trip of every request, and for every line the time
from its "print" to the answer that stored it (ingestion lag). Commands on stdin, one per
line: `mark` (forget what was recorded so far), `report` (print one JSON line of what was
recorded since the mark), `exit` (every attempt reports exit 0; prints `done` when all have).

    python bench/scale_loadgen.py --url http://127.0.0.1:8000 --fifo /tmp/x/launches
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import sys
import time
from datetime import UTC, datetime

SHIM = """#!/bin/sh
# Plays the runner's start for bench/scale_loadgen.py: hand the token over, then stay alive.
token=$(cat "$TRAINYARD_RUNNER_TOKEN_FILE") && rm -f "$TRAINYARD_RUNNER_TOKEN_FILE"
printf '%s %s\\n' "$TRAINYARD_JOB_ID" "$token" > {fifo}
exec sleep 86400
"""


class Http:
    """HTTP/1.1 requests on a fresh connection each (`Connection: close`), as the runner
    makes them."""

    def __init__(self, url: str) -> None:
        rest = url.split("://", 1)[1]
        self.host, _, port = rest.partition(":")
        self.port = int(port or 80)

    async def request(
        self, method: str, path: str, token: str, body: bytes = b"", encoding: str = ""
    ) -> tuple[int, bytes, float]:
        started = time.perf_counter()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            encoded = f"Content-Encoding: {encoding}\r\n" if encoding else ""
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"{auth}{encoded}X-Trainyard-Protocol: 1\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        payload = answer.partition(b"\r\n\r\n")[2]
        if b"transfer-encoding: chunked" in answer.partition(b"\r\n\r\n")[0].lower():
            payload = _dechunk(payload)
        return status, payload, time.perf_counter() - started


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


class HostRelay:
    """`runner.relay` of one host, played: its two lanes, log batches and heartbeats."""

    RELAY_PATH = "/api/v1/runner/relay"

    def __init__(
        self, http: Http, rec: Recorder, one_lane: bool = False, batch_interval_s: float = 0.0
    ) -> None:
        logs = RelayLane(http, rec, self.RELAY_PATH, "bundle", batch_interval_s)
        beats = (
            logs
            if one_lane
            else RelayLane(http, rec, self.RELAY_PATH + "?calls=heartbeat", "beat bundle")
        )
        self.lanes = {"logs": logs, "heartbeat": beats}

    async def submit(self, job_id: str, token: str, call: str, body: bytes):
        return await self.lanes[call].submit(job_id, token, call, body)


class RelayLane:
    """One lane of a host relay: calls wait in a queue; one bundle at a time goes to `path`
    with everything that waited (up to RELAY_MAX_ENTRIES); each call gets its entry's
    answer, or a 502 when the bundle got none. Its bundles' round trips and sizes are
    recorded as `kind`."""

    RELAY_MAX_ENTRIES = 500
    GZIP_MIN_BYTES = 32 * 1024

    def __init__(
        self, http: Http, rec: Recorder, path: str, kind: str, min_interval_s: float = 0.0
    ) -> None:
        self.http, self.rec, self.path, self.kind = http, rec, path, kind
        self.min_interval_s = min_interval_s
        self.waiting: list[tuple[bytes, asyncio.Future]] = []
        self.wake = asyncio.Event()
        self.task = asyncio.ensure_future(self.forward_forever())

    async def submit(self, job_id: str, token: str, call: str, body: bytes):
        entry = json.dumps({"job_id": job_id, "token": token, "call": call}).encode()
        future = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        self.waiting.append((entry[:-1] + b', "body": ' + (body or b"{}") + b"}", future))
        self.wake.set()
        status, payload = await future
        return status, payload, time.perf_counter() - started

    async def forward_forever(self) -> None:
        loop = asyncio.get_running_loop()
        last_sent = float("-inf")
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.waiting:
                due = last_sent + self.min_interval_s - loop.time()
                if due > 0 and len(self.waiting) < self.RELAY_MAX_ENTRIES:
                    await asyncio.sleep(due)  # a busy host's batches gather meanwhile
                bundle = self.waiting[: self.RELAY_MAX_ENTRIES]
                del self.waiting[: self.RELAY_MAX_ENTRIES]
                last_sent = loop.time()
                await self.forward(bundle)

    async def forward(self, bundle: list[tuple[bytes, asyncio.Future]]) -> None:
        body = b'{"entries": [' + b", ".join(entry for entry, _ in bundle) + b"]}"
        encoding = ""
        if len(body) >= self.GZIP_MIN_BYTES:
            body, encoding = gzip.compress(body, compresslevel=1, mtime=0), "gzip"
        try:
            status, payload, seconds = await self.http.request(
                "POST", self.path, "", body, encoding
            )
        except OSError:
            status, payload = 0, b""
        results = json.loads(payload)["results"] if status == 200 else None
        if results is None:
            self.rec.error(self.kind)
        else:
            self.rec.bundle(self.kind, seconds, len(bundle))
        for index, (_, future) in enumerate(bundle):
            if results is None:
                future.set_result((502, b""))
            else:
                result = results[index]
                future.set_result((result["status"], json.dumps(result["body"]).encode()))


class Recorder:
    def __init__(self) -> None:
        self.mark()
        self.attempts = 0
        self.running = 0
        self.failures: dict[str, int] = {}

    def mark(self) -> None:
        self.rtt: dict[str, list[float]] = {}
        self.lag: list[float] = []
        self.bundle_sizes: dict[str, list[int]] = {}
        self.errors: dict[str, int] = {}
        self.since = time.time()

    def round_trip(self, kind: str, seconds: float) -> None:
        self.rtt.setdefault(kind, []).append(seconds)

    def bundle(self, kind: str, seconds: float, size: int) -> None:
        """A relay lane's bundle: its round trip and how many calls it carried."""
        self.round_trip(kind, seconds)
        self.bundle_sizes.setdefault(kind, []).append(size)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.failures[kind] = self.failures.get(kind, 0) + 1

    def report(self) -> dict:
        return {
            "window_s": time.time() - self.since,
            "rtt": self.rtt,
            "lag": self.lag,
            "bundle_sizes": self.bundle_sizes,
            "errors": self.errors,
            "attempts": self.attempts,
            "running": self.running,
        }


class Attempt:
    """One attempt, played as the runner plays it."""

    def __init__(
        self, http: Http, rec: Recorder, args, job_id: str, token: str, relay: HostRelay | None
    ) -> None:
        self.http, self.rec, self.args = http, rec, args
        self.token, self.job_id, self.relay = token, job_id, relay
        self.base = f"/api/v1/runner/jobs/{job_id}/"
        self.exit_code: int | None = None  # set by `exit`, or by a terminate order
        self.heard_at = float("-inf")  # when a batch's answer last carried an order
        self.quiet = False  # prints nothing, so it heartbeats on schedule

    async def call(self, method: str, what: str, body: object = None) -> tuple[int, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        try:
            if self.relay is not None and what in ("logs", "heartbeat"):
                status, payload, seconds = await self.relay.submit(
                    self.job_id, self.token, what, data
                )
            else:
                status, payload, seconds = await self.http.request(
                    method, self.base + what, self.token, data
                )
        except OSError:
            self.rec.error(what)
            return 0, b""
        if status >= 400 or status == 0:
            self.rec.error(what)
        else:
            self.rec.round_trip(what, seconds)
        return status, payload

    async def call_retrying(self, method: str, what: str, body: object = None) -> tuple[int, bytes]:
        """`call` until the answer is neither a 5xx nor a failed connection, sleeping the
        runner's backoff in between (0.2 s doubling to 10 s, half of it jitter)."""
        delay = 0.2
        while True:
            status, payload = await self.call(method, what, body)
            if status != 0 and status < 500:
                return status, payload
            await asyncio.sleep(delay / 2 + random.uniform(0, delay / 2))
            delay = min(delay * 2, 10.0)

    async def run(self) -> None:
        self.rec.attempts += 1
        status, payload = await self.call_retrying("GET", "spec")
        if status != 200:
            return
        spec = json.loads(payload)
        heartbeat_s = self.args.heartbeat_s or float(spec["heartbeat_interval_s"])
        batch_s = float(spec["log_batch_max_interval_s"])
        status, _ = await self.call_retrying("POST", "started", {})
        if status != 200:
            return
        self.rec.running += 1
        loop = asyncio.get_running_loop()
        now = loop.time()
        next_line = float("inf") if self.quiet else now + random.uniform(0, self.args.line_s)
        next_beat = now + random.uniform(0, heartbeat_s)
        seq, pending, due, sender = 0, [], None, None
        while self.exit_code is None:
            wake = min(next_line, next_beat, due if due is not None else next_beat)
            await asyncio.sleep(max(0.0, wake - loop.time()))
            now = loop.time()
            if now >= next_line:
                seq += 1
                pending.append((seq, time.time()))
                next_line += self.args.line_s
                if due is None:
                    due = now + batch_s
            if due is not None and now >= due and (sender is None or sender.done()):
                sender = asyncio.ensure_future(self.send(pending))
                pending, due = [], None
            if now >= next_beat:
                heard = self.heard_at + heartbeat_s
                if heard > now and not self.args.always_heartbeat:
                    next_beat = heard  # a batch's answer stood in for this heartbeat
                    continue
                next_beat = now + heartbeat_s
                status, payload = await self.call("POST", "heartbeat", {})
                if b"terminate" in payload or status == 409:
                    self.exit_code = 143
        if sender is not None:
            await sender
        if pending:
            await self.send(pending)
        await self.call_retrying("POST", "exit", {"exit_code": self.exit_code})
        self.rec.running -= 1

    async def send(self, lines: list[tuple[int, float]]) -> None:
        body = {
            "lines": [
                {
                    "seq": seq,
                    "ts": datetime.fromtimestamp(printed, UTC).isoformat(),
                    "source": "user",
                    "stream": "stdout",
                    "message": f"tick {seq}",
                }
                for seq, printed in lines
            ]
        }
        status, payload = await self.call_retrying("POST", "logs", body)
        if status == 200:
            stored = time.time()
            self.rec.lag.extend(stored - printed for _, printed in lines)
            if b'"order"' in payload:
                self.heard_at = asyncio.get_running_loop().time()
                if b"terminate" in payload:
                    self.exit_code = 143


async def main(args) -> None:
    http, rec = Http(args.url), Recorder()
    relays = [
        HostRelay(http, rec, args.one_lane, args.batch_interval_ms / 1000)
        for _ in range(args.relay_hosts)
    ]
    attempts: list[Attempt] = []
    tasks: list[asyncio.Task] = []
    loop = asyncio.get_running_loop()
    fifo = os.open(args.fifo, os.O_RDWR | os.O_NONBLOCK)  # RDWR: never an EOF
    buffered = bytearray()

    def launched() -> None:
        buffered.extend(os.read(fifo, 65536))
        while b"\n" in buffered:
            line, _, rest = bytes(buffered).partition(b"\n")
            buffered[:] = rest
            job_id, _, token = line.decode().partition(" ")
            relay = relays[len(attempts) % len(relays)] if relays else None
            attempt = Attempt(http, rec, args, job_id, token.strip(), relay)
            every = args.quiet_every
            attempt.quiet = every > 0 and len(attempts) % every == every - 1
            attempts.append(attempt)
            tasks.append(asyncio.ensure_future(attempt.run()))

    loop.add_reader(fifo, launched)
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    print("ready", flush=True)
    while True:
        command = (await commands.readline()).decode().strip()
        if command == "mark":
            rec.mark()
            print("marked", flush=True)
        elif command == "report":
            print(json.dumps(rec.report()), flush=True)
        elif command in ("exit", ""):
            for attempt in attempts:
                if attempt.exit_code is None:
                    attempt.exit_code = 0
            await asyncio.gather(*tasks, return_exceptions=True)
            print(json.dumps({"failures": rec.failures}), flush=True)
            print("done", flush=True)
            return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--fifo", required=True)
    parser.add_argument("--line-s", type=float, default=1.0)
    parser.add_argument("--heartbeat-s", type=float, default=0.0)
    parser.add_argument("--always-heartbeat", action="store_true")
    parser.add_argument("--relay-hosts", type=int, default=0)
    parser.add_argument("--quiet-every", type=int, default=0)
    parser.add_argument("--one-lane", action="store_true")
    parser.add_argument("--batch-interval-ms", type=float, default=200.0)
    asyncio.run(main(parser.parse_args()))
