"""Output: a real child's pipes through the reader threads into a real spool."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import textwrap

import pytest

from runner.masking import Masker
from runner.output import MAX_MESSAGE_CHARS, OutputCollector, utc_now_iso
from runner.spool import Spool

SECRET = "sk-live-0123456789abcdef"


def _spooled(tmp_path) -> list[dict]:
    return [json.loads(raw) for raw in (tmp_path / "spool.jsonl").read_text().splitlines()]


def _run_child(tmp_path, code: str, masker: Masker, **collector_kwargs) -> list[dict]:
    spool = Spool(tmp_path)
    collector = OutputCollector(spool, masker, **collector_kwargs)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    collector.start_reader(child.stdout, "stdout")
    collector.start_reader(child.stderr, "stderr")
    assert child.wait(timeout=30) == 0
    assert collector.join_readers(10)
    collector.close()
    spool.close()
    return _spooled(tmp_path)


CHILD = f"""
    import sys, time
    out, err = sys.stdout.buffer, sys.stderr.buffer
    def pause():
        out.flush(); err.flush(); time.sleep(0.05)
    out.write(b"token is {SECRET[:9]}"); out.flush(); time.sleep(0.2)
    out.write(b"{SECRET[9:]} and more\\n"); pause()
    err.write(b"an error line\\n"); pause()
    out.write(b"L" * 50000 + b"\\n"); pause()
    out.write(b"windows line\\r\\n"); pause()
    out.write(b"bad \\xff\\xfe utf8 \\xc3\\n"); pause()
    err.write(b"{base64.b64encode(SECRET.encode()).decode()}\\n"); pause()
    out.write(b"\\n"); pause()
    out.write(b"no newline at the end")
"""


def test_it_spools_numbered_masked_lines_from_a_real_child(tmp_path):
    lines = _run_child(tmp_path, CHILD, Masker([SECRET]))

    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert {line["source"] for line in lines} == {"user"}
    messages = [(line["stream"], line["message"]) for line in lines]
    long_parts = math.ceil(50000 / MAX_MESSAGE_CHARS)
    assert messages == [
        ("stdout", "token is *** and more"),
        ("stderr", "an error line"),
        *[("stdout", "L" * size) for size in _chunks(50000)],
        ("stdout", "windows line"),
        ("stdout", "bad \ufffd\ufffd utf8 \ufffd"),
        ("stderr", "***"),
        ("stdout", ""),
        ("stdout", "no newline at the end"),
    ]
    assert long_parts == 4
    assert all(line["ts"].endswith("Z") and len(line["ts"]) == 27 for line in lines)
    assert all(SECRET not in line["message"] for line in lines)


def _chunks(length: int) -> list[int]:
    return [min(MAX_MESSAGE_CHARS, length - start) for start in range(0, length, 16384)]


@pytest.mark.parametrize("chunk", [7, 1000, 4096, 65536])
def test_a_line_longer_than_the_read_buffer_is_masked_across_reads_and_splits(tmp_path, chunk):
    masker = Masker([SECRET])
    b64 = base64.b64encode(b"x" + SECRET.encode()).decode()
    # Secrets at many offsets, so some straddle a read boundary and some a 16,384 split;
    # multi-byte characters straddle reads too.
    unit = "é日本-" * 50
    parts = []
    for i in range(400):
        parts.append(unit[: i % 37] + "a" * (i * 7 % 311))
        parts.append(SECRET if i % 3 else b64)
    line = "".join(parts) + "\r"
    expected = masker.mask(line[:-1])
    assert len(expected) > 3 * MAX_MESSAGE_CHARS
    data_file = tmp_path / "line.bin"
    data_file.write_bytes(line.encode())
    code = f"""
        import sys
        data = open({str(data_file)!r}, "rb").read()
        for i in range(0, len(data), 333):
            sys.stdout.buffer.write(data[i:i + 333]); sys.stdout.buffer.flush()
        sys.stdout.buffer.write(b"\\nafter\\n")
    """

    lines = _run_child(tmp_path, code, masker, read_chunk_bytes=chunk)

    messages = [line["message"] for line in lines]
    assert messages[-1] == "after"
    pieces = messages[:-1]
    assert len(pieces) == math.ceil(len(expected) / MAX_MESSAGE_CHARS)
    assert all(len(piece) == MAX_MESSAGE_CHARS for piece in pieces[:-1])
    assert "".join(pieces) == expected
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))


def test_a_secret_across_the_16384_split_of_one_read_is_masked(tmp_path):
    head = MAX_MESSAGE_CHARS - 5
    code = f"import sys; sys.stdout.write('a' * {head} + {SECRET!r} + 'b' * 20000 + '\\n')"

    lines = _run_child(tmp_path, code, Masker([SECRET]))

    masked = "a" * head + "***" + "b" * 20000
    assert [line["message"] for line in lines] == [
        masked[i : i + MAX_MESSAGE_CHARS] for i in range(0, len(masked), MAX_MESSAGE_CHARS)
    ]


def test_system_lines_share_the_sequence_and_are_masked(tmp_path):
    spool = Spool(tmp_path)
    collector = OutputCollector(spool, Masker([SECRET]))

    collector.system("fetched spec")
    collector.system(f"starting workload: python train.py --token {SECRET}")
    collector.close()
    collector.system("after close: dropped")
    spool.close()

    assert [
        (line["seq"], line["source"], line["stream"], line["message"])
        for line in _spooled(tmp_path)
    ] == [
        (1, "system", "stdout", "fetched spec"),
        (2, "system", "stdout", "starting workload: python train.py --token ***"),
    ]


def test_numbering_continues_after_lines_already_in_the_spool(tmp_path):
    spool = Spool(tmp_path)
    OutputCollector(spool, Masker([])).system("first runner")
    spool.close()

    spool = Spool(tmp_path)
    collector = OutputCollector(spool, Masker([]))
    collector.system("second runner")
    spool.close()

    assert [line["seq"] for line in _spooled(tmp_path)] == [1, 2]
    assert collector.last_seq == 2


def test_timestamps_are_utc_with_microseconds_and_z():
    stamp = utc_now_iso()

    assert len(stamp) == 27 and stamp[10] == "T" and stamp[19] == "." and stamp.endswith("Z")
