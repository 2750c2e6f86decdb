"""The spool: lines on disk first, an acknowledgement mark, resumption after a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.spool import Spool

REPO = Path(__file__).resolve().parents[2]


def _line(seq: int, message: str | None = None) -> dict:
    return {
        "seq": seq,
        "ts": "2026-07-29T12:06:02.123456Z",
        "source": "user",
        "stream": "stdout",
        "message": f"line {seq}" if message is None else message,
    }


def test_it_hands_out_unacked_lines_in_order_until_acked(tmp_path):
    spool = Spool(tmp_path)
    for seq in range(1, 6):
        spool.append(_line(seq))

    assert [line["seq"] for line in spool.unacked(3)] == [1, 2, 3]
    assert [line["seq"] for line in spool.unacked(3)] == [1, 2, 3]  # not acked: same again
    assert spool.pending == 5

    spool.ack(3)

    assert spool.acked_seq == 3
    assert (tmp_path / "spool.acked").read_text().strip() == "3"
    assert [line["seq"] for line in spool.unacked(10)] == [4, 5]
    spool.append(_line(6))
    assert [line["seq"] for line in spool.unacked(10)] == [4, 5, 6]
    spool.ack(6)
    assert spool.unacked(10) == []
    assert spool.pending == 0
    spool.close()


def test_it_stores_one_json_object_per_line_as_sent(tmp_path):
    spool = Spool(tmp_path)
    spool.append(_line(1, "naïve 日本 \x00 {'loss': 2.31}"))
    spool.close()

    rows = [json.loads(raw) for raw in (tmp_path / "spool.jsonl").read_text().splitlines()]

    assert rows == [_line(1, "naïve 日本 \x00 {'loss': 2.31}")]


def test_messages_sharing_a_time_are_spooled_as_the_same_json_objects(tmp_path):
    messages = ["plain", 'naïve 日本 \x00 \ud800 "quoted" \\ \t', "", "{'loss': 2.31}"]
    by_dicts, by_messages = Spool(tmp_path / "dicts"), Spool(tmp_path / "messages")
    by_dicts.append_many([_line(seq, message) for seq, message in enumerate(messages, 7)])
    by_messages.append_messages(7, "2026-07-29T12:06:02.123456Z", "user", "stdout", messages)

    assert by_messages.last_seq == by_dicts.last_seq == 10
    assert by_messages.unacked_raw(10) == by_dicts.unacked_raw(10)
    assert [line["message"] for line in by_messages.unacked(10)] == messages
    by_dicts.close()
    by_messages.close()
    written = (tmp_path / "messages" / "spool.jsonl").read_bytes()
    assert written == (tmp_path / "dicts" / "spool.jsonl").read_bytes()


def test_a_new_spool_on_the_same_directory_resumes_after_the_acked_seq(tmp_path):
    spool = Spool(tmp_path)
    for seq in range(1, 11):
        spool.append(_line(seq))
    spool.unacked(4)
    spool.ack(4)
    spool.close()

    reopened = Spool(tmp_path)

    assert reopened.acked_seq == 4
    assert reopened.last_seq == 10
    assert [line["seq"] for line in reopened.unacked(100)] == list(range(5, 11))
    reopened.append(_line(11))
    assert reopened.unacked(100)[-1]["seq"] == 11
    reopened.close()


def test_it_drops_a_torn_last_line_when_reopened(tmp_path):
    spool = Spool(tmp_path)
    spool.append(_line(1))
    spool.append(_line(2))
    spool.close()
    with open(tmp_path / "spool.jsonl", "ab") as fh:
        fh.write(b'{"seq":3,"ts":"2026-07-29T12:0')  # the machine died mid-write

    reopened = Spool(tmp_path)

    assert reopened.last_seq == 2
    assert [line["seq"] for line in reopened.unacked(10)] == [1, 2]
    reopened.append(_line(3))
    assert [line["seq"] for line in reopened.unacked(10)] == [1, 2, 3]
    reopened.close()


def test_an_ack_beyond_what_was_read_skips_forward(tmp_path):
    spool = Spool(tmp_path)
    for seq in range(1, 8):
        spool.append(_line(seq))

    spool.ack(5)

    assert [line["seq"] for line in spool.unacked(10)] == [6, 7]
    spool.close()


def test_unacked_caps_a_batch_by_bytes_but_hands_out_at_least_one_line(tmp_path):
    spool = Spool(tmp_path)
    for seq in range(1, 6):
        spool.append(_line(seq, "x" * 1000))

    assert [line["seq"] for line in spool.unacked(100, max_bytes=2500)] == [1, 2]
    assert [line["seq"] for line in spool.unacked(100, max_bytes=10)] == [1]
    assert [line["seq"] for line in spool.unacked(3, max_bytes=10**6)] == [1, 2, 3]
    spool.close()


def test_a_failed_append_leaves_no_torn_line(tmp_path):
    # A real write error: the file size limit makes write(2) fail with EFBIG part-way.
    code = f"""
        import resource, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from runner.spool import Spool
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        spool = Spool({str(tmp_path)!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, (400, 400))
        failed = 0
        for seq in range(1, 4):  # about 170 bytes each: the third is cut
            line = {{"seq": seq, "ts": "t", "source": "user", "stream": "stdout",
                     "message": "m" * 100}}
            try:
                spool.append(line)
            except OSError:
                failed += 1
        print(failed, spool.last_seq)
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )

    assert result.stdout.split() == ["1", "2"]
    raw = (tmp_path / "spool.jsonl").read_bytes()  # before a reopen could repair anything
    assert [json.loads(row)["seq"] for row in raw.splitlines()] == [1, 2]
    assert raw.endswith(b"\n")


def test_it_appends_200000_lines_in_a_few_seconds(tmp_path):
    spool = Spool(tmp_path)
    message = "{'loss': 2.3125, 'grad_norm': 1.25, 'learning_rate': 0.0002, 'epoch': 0.25}"
    started = time.perf_counter()
    for seq in range(1, 200_001):
        spool.append(_line(seq, message))
    spool.sync()
    append_s = time.perf_counter() - started

    sent = 0
    while batch := spool.unacked(1000):
        sent += len(batch)
        spool.ack(batch[-1]["seq"])
    total_s = time.perf_counter() - started
    spool.close()

    print(f"spool: {200_000 / append_s:,.0f} lines/s appended; {total_s:.2f} s with reading back")
    assert sent == 200_000
    assert append_s < 8


def test_append_many_writes_its_lines_with_one_write_and_hands_them_out_raw(tmp_path):
    spool = Spool(tmp_path)
    spool.append_many([_line(seq) for seq in range(1, 6)])
    assert spool.last_seq == 5
    raw = spool.unacked_raw(10)
    assert [seq for seq, _ in raw] == [1, 2, 3, 4, 5]
    assert [json.loads(line) for _, line in raw] == [_line(seq) for seq in range(1, 6)]
    # A batch that follows one in flight: the lines after that one's last seq.
    assert [seq for seq, _ in spool.unacked_raw(2, after=2)] == [3, 4]
    assert [seq for seq, _ in spool.unacked_raw(10, after=5)] == []
    spool.ack(2)
    assert [seq for seq, _ in spool.unacked_raw(10, after=3)] == [4, 5]


def test_a_failed_append_many_writes_none_of_its_lines(tmp_path):
    spool = Spool(tmp_path)
    spool.append(_line(1))
    with pytest.raises(TypeError):
        spool.append_many([_line(2), {"seq": 3, "message": object()}])
    assert spool.last_seq == 1
    spool.append_many([_line(2)])
    assert [line["seq"] for line in spool.unacked(10)] == [1, 2]
