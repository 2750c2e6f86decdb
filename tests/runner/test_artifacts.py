"""Artifacts on the runner's side: the JSON lines that ask for uploads, packing, safe
extraction, and end to end (`python -m runner` against tests/runner/peer.py) the uploads
before `exit` and the checkpoint a resumed attempt starts from."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
from pathlib import Path

import pytest

from runner.artifacts import (
    ArtifactRequest,
    UnsafeArchive,
    inside,
    pack_directory,
    parse_artifact_line,
    safe_extract,
)

# test_agent.py's fixtures `launch` and `plane` are imported to be used as fixtures, which
# ruff reads as a redefinition in every test that takes them.
# ruff: noqa: F811
from tests.runner.test_agent import (  # noqa: F401
    JOB,
    _runner_log,
    assert_complete,
    launch,
    plane,
    script,
    spec,
)

# -- the lines ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"type": "checkpoint", "step": 5, "path": "/w/ckpt/checkpoint-5"}',
            ArtifactRequest("checkpoint", 5, "/w/ckpt/checkpoint-5"),
        ),
        ('{"type": "adapter", "path": "/w/a"}', ArtifactRequest("adapter", None, "/w/a")),
        ('  {"path": "/w/a", "type": "adapter", "step": 9}', ArtifactRequest("adapter", 9, "/w/a")),
        (
            '{"type": "checkpoint", "step": true, "path": "/x"}',
            ArtifactRequest("checkpoint", None, "/x"),
        ),
        ('{"type": "metrics", "path": "/x", "note": "checkpoint"}', None),
        ('{"type": "checkpoint", "step": 5}', None),
        ('{"type": "checkpoint", "step": 5, "path": ""}', None),
        ('{"type": "checkpoint", "step": 5, "path": "/x"', None),
        ('["checkpoint", "path"]', None),
        ("saving checkpoint to /x", None),
    ],
)
def test_it_recognises_only_the_artifact_lines(line, expected):
    assert parse_artifact_line(line) == expected


def test_inside_resolves_symlinks_and_excludes_the_root_itself(tmp_path):
    root = tmp_path / "ckpt"
    (root / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "sneaky").symlink_to(tmp_path / "elsewhere")
    assert inside(root / "checkpoint-1", root)
    assert inside(str(root / "checkpoint-1" / ".." / "checkpoint-1"), root)
    assert not inside(root, root)
    assert not inside(root / "sneaky", root)
    assert not inside(root / ".." / "elsewhere", root)
    assert not inside(tmp_path / "ckpt2", root)


# -- packing and extraction --------------------------------------------------------------


def _tree(root: Path) -> Path:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "b.bin").write_bytes(b"\x00\x01weights")
    (root / "a.json").write_text('{"step": 5}')
    (root / "sub" / "deeper" / "c.txt").write_text("nested")
    (root / "link-inside").symlink_to("a.json")
    (root / "link-outside").symlink_to("/etc/passwd")
    return root


def test_packing_is_relative_sorted_deterministic_and_leaves_escaping_links_out(tmp_path):
    source = _tree(tmp_path / "checkpoint-5")

    first = pack_directory(source, tmp_path / "one.tar.gz")
    second = pack_directory(source, tmp_path / "two.tar.gz")

    assert first.sha256 == second.sha256
    assert first.sha256 == hashlib.sha256((tmp_path / "one.tar.gz").read_bytes()).hexdigest()
    assert first.size == (tmp_path / "one.tar.gz").stat().st_size
    with tarfile.open(first.path) as tar:
        names = tar.getnames()
        assert names == [
            "a.json",
            "b.bin",
            "link-inside",
            "sub",
            "sub/deeper",
            "sub/deeper/c.txt",
        ]
        assert tar.getmember("link-inside").issym()
        assert tar.extractfile("b.bin").read() == b"\x00\x01weights"


def test_a_packed_checkpoint_extracts_to_the_same_files(tmp_path):
    source = _tree(tmp_path / "checkpoint-5")
    packed = pack_directory(source, tmp_path / "c.tar.gz")

    safe_extract(packed.path, tmp_path / "out")

    out = tmp_path / "out"
    assert (out / "a.json").read_text() == '{"step": 5}'
    assert (out / "b.bin").read_bytes() == b"\x00\x01weights"
    assert (out / "sub" / "deeper" / "c.txt").read_text() == "nested"
    assert os.readlink(out / "link-inside") == "a.json"
    assert not (out / "link-outside").exists()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.mark.parametrize(
    "members",
    [
        [_file("/etc/evil")],
        [_file("../evil")],
        [_file("ok/../../evil")],
        [_link("l", "/etc")],
        [_link("l", "../outside")],
        # Lexically inside, but `.` resolved through `s` leads to the parent.
        [_link("s", "."), _link("y", "s/../outside")],
        # A link to a folder outside, then a file written through it.
        [_link("d", "../"), _file("d/evil")],
        [_file("a"), _link("h", "../a", tarfile.LNKTYPE)],
        [_file("twice"), _file("twice")],
        [_link("fifo", "", tarfile.FIFOTYPE)],
    ],
)
def test_an_unsafe_archive_is_refused_and_writes_nothing_outside(tmp_path, members):
    archive = _archive(tmp_path / "bad.tar.gz", members)
    before = sorted(p.name for p in tmp_path.iterdir())

    with pytest.raises(UnsafeArchive):
        safe_extract(archive, tmp_path / "sandbox" / "out")

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "sandbox"])
    assert not (tmp_path / "sandbox" / "evil").exists()
    assert not (tmp_path / "sandbox" / "outside").exists()


def test_an_archive_made_with_tar_c_dir_dot_extracts(tmp_path):
    archive = _archive(
        tmp_path / "dot.tar.gz", [_link("./", "", tarfile.DIRTYPE), _file("./a", b"weights")]
    )
    safe_extract(archive, tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a"]


def test_a_hard_link_to_an_extracted_file_is_a_copy(tmp_path):
    archive = _archive(
        tmp_path / "ok.tar.gz", [_file("a", b"weights"), _link("b", "a", tarfile.LNKTYPE)]
    )
    safe_extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "b").read_bytes() == b"weights"


# -- end to end --------------------------------------------------------------------------

SAVES = r"""
set -e
ck="$PWD/$TRAINYARD_CHECKPOINT_DIR"
mkdir -p "$ck/checkpoint-5/sub" "$ck/adapter" /tmp/not-a-checkpoint-$$
echo "weights at five" > "$ck/checkpoint-5/model.bin"
echo '{"step": 5}' > "$ck/checkpoint-5/sub/state.json"
echo '{"type": "checkpoint", "step": 5, "path": "'"$ck"'/checkpoint-5"}'
echo '{"type": "checkpoint", "step": 6, "path": "/tmp/not-a-checkpoint-'$$'"}'
echo '{"type": "checkpoint", "path": "'"$ck"'/checkpoint-5"}'
echo "adapter weights" > "$ck/adapter/adapter_model.safetensors"
echo '{"type": "adapter", "path": "'"$ck"'/adapter"}'
rmdir /tmp/not-a-checkpoint-$$
echo done
"""


def _members(body: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {
            m.name: tar.extractfile(m).read() if m.isfile() else b"<dir>" for m in tar.getmembers()
        }


def test_announced_checkpoints_and_adapters_are_uploaded_before_exit(plane, launch, tmp_path):
    plane.spec = spec(script_b64=script(SAVES))
    plane.upload_statuses = [503, 502]  # the first tries fail; the runner retries

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    lines = assert_complete(plane)
    assert [(u["kind"], u["step"]) for u in plane.uploads] == [("checkpoint", 5), ("adapter", None)]
    assert len(plane.upload_tries) == 4
    for upload in plane.uploads:
        assert upload["content_type"] == "application/gzip"
        assert upload["sha256"] == hashlib.sha256(upload["body"]).hexdigest()
    assert _members(plane.uploads[0]["body"]) == {
        "model.bin": b"weights at five\n",
        "sub": b"<dir>",
        "sub/state.json": b'{"step": 5}\n',
    }
    assert _members(plane.uploads[1]["body"]) == {"adapter_model.safetensors": b"adapter weights\n"}
    user = plane.messages("user")
    assert user[0].startswith('{"type": "checkpoint", "step": 5, "path": "/')  # still logged
    assert user[-1] == "done"
    system = plane.messages("system")
    assert any(m.startswith("uploaded the checkpoint at step 5 (") for m in system)
    assert any(m.startswith("uploaded the adapter (") and m.endswith("as art_2") for m in system)
    assert any(
        m.startswith("not uploading /tmp/not-a-checkpoint-") and "not a directory inside" in m
        for m in system
    )
    assert any(m.endswith("it has no step") for m in system)
    # Uploads finished before the last line, and `exit` came after every line.
    assert lines[-1]["message"] == "workload exited with code 0"
    assert plane.exits[0]["exit_code"] == 0
    assert not list((tmp_path / "attempt").glob("artifact-*.tmp"))


# Metrics, then at once the checkpoint of those steps: a runner killed right after the upload
# must not leave the control plane with the checkpoint but without the steps it holds.
METRICS_THEN_CHECKPOINT = r"""
ck="$PWD/$TRAINYARD_CHECKPOINT_DIR"
mkdir -p "$ck/checkpoint-3"
echo "weights" > "$ck/checkpoint-3/model.bin"
for step in 1 2 3; do echo '{"step": '$step', "loss": 0.5}'; done
echo '{"type": "checkpoint", "step": 3, "path": "'"$ck"'/checkpoint-3"}'
"""


def test_a_checkpoint_is_uploaded_only_after_the_lines_printed_before_it(plane, launch, tmp_path):
    plane.spec = spec(script_b64=script(METRICS_THEN_CHECKPOINT), log_batch_max_interval_s=2.0)

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    (upload,) = plane.uploads
    told = upload["messages_before"]
    for step in (1, 2, 3):
        assert f'{{"step": {step}, "loss": 0.5}}' in told, told
    assert any(m.startswith('{"type": "checkpoint", "step": 3') for m in told), told


def test_an_upload_that_never_succeeds_is_bounded_by_final_flush_timeout(plane, launch, tmp_path):
    plane.spec = spec(
        script_b64=script(SAVES),
        final_flush_timeout_s=2,
    )
    plane.upload_statuses = [503] * 10_000

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.uploads == []
    assert plane.exits[0]["exit_code"] == 0
    assert "artifact uploads not finished within 2 s" in plane.messages("system")


def _checkpoint_archive(tmp_path: Path) -> bytes:
    source = tmp_path / "made" / "checkpoint-7"
    (source / "sub").mkdir(parents=True)
    (source / "trainer_state.json").write_text('{"global_step": 7}')
    (source / "sub" / "weights.bin").write_bytes(b"seven")
    return pack_directory(source, tmp_path / "made.tar.gz").path.read_bytes()


PRINT_RESUME = r"""
echo "resume=$TRAINYARD_RESUME_FROM"
if [ -n "$TRAINYARD_RESUME_FROM" ]; then cat "$TRAINYARD_RESUME_FROM/trainer_state.json"; echo; fi
"""
DOWNLOAD = f"/api/v1/runner/jobs/{JOB}/artifacts/12/download"


def _resume_from(body: bytes, **overrides) -> dict:
    return {
        "artifact_id": "art_12",
        "step": 7,
        "sha256": hashlib.sha256(body).hexdigest(),
        "download_url": DOWNLOAD,
        **overrides,
    }


def test_a_resumed_attempt_gets_the_checkpoint_extracted(plane, launch, tmp_path):
    body = _checkpoint_archive(tmp_path)
    plane.downloads[DOWNLOAD] = body
    plane.download_statuses = [503]
    plane.spec = spec(script_b64=script(PRINT_RESUME), resume_from=_resume_from(body))

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    resume_dir = tmp_path / "attempt" / "resume" / "checkpoint-7"
    assert plane.messages("user") == [f"resume={resume_dir}", '{"global_step": 7}']
    system = plane.messages("system")
    assert system[:3] == [
        "fetched spec",
        "resuming from checkpoint at step 7",
        f"starting workload: bash {tmp_path / 'attempt' / 'script.sh'}",
    ]
    assert plane.download_tries == [DOWNLOAD, DOWNLOAD]
    assert (resume_dir / "sub" / "weights.bin").read_bytes() == b"seven"
    assert sorted(p.name for p in (tmp_path / "attempt" / "resume").iterdir()) == ["checkpoint-7"]
    # `started` tells the control plane where the workload picks up (for the loss curve).
    assert plane.started[0]["resumed_from_step"] == 7


@pytest.mark.parametrize(
    ("served", "announced", "why"),
    [
        ("archive+x", "archive", "hashes to"),
        (None, "archive", "HTTP 404"),
        ("garbage", "garbage", "not a gzip file"),
    ],
)
def test_a_checkpoint_that_cannot_be_fetched_starts_the_workload_without_it(
    plane, launch, tmp_path, served, announced, why
):
    bodies = {"archive": _checkpoint_archive(tmp_path), "garbage": b"not a tar at all"}
    bodies["archive+x"] = bodies["archive"] + b"x"
    if served is not None:
        plane.downloads[DOWNLOAD] = bodies[served]
    plane.spec = spec(script_b64=script(PRINT_RESUME), resume_from=_resume_from(bodies[announced]))

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.messages("user") == ["resume="]
    failure = plane.messages("system")[1]
    assert failure.startswith("could not fetch the checkpoint to resume from: ")
    assert why in failure and failure.endswith("; starting without it")
    assert plane.exits[0]["exit_code"] == 0
    assert sorted(p.name for p in (tmp_path / "attempt" / "resume").iterdir()) == []
    assert plane.started[0]["resumed_from_step"] is None


def test_a_download_away_past_the_bound_starts_without_resume(plane, launch, tmp_path):
    body = _checkpoint_archive(tmp_path)
    plane.downloads[DOWNLOAD] = body
    plane.download_statuses = [503] * 10_000
    plane.spec = spec(
        command=[sys.executable, "-c", "import os; print(os.environ['TRAINYARD_RESUME_FROM'])"],
        resume_from=_resume_from(body),
        final_flush_timeout_s=1.5,
    )

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert plane.messages("user") == [""]
    assert plane.messages("system")[1].startswith("could not fetch the checkpoint")
    assert len(plane.download_tries) >= 3


def test_an_upload_refused_as_too_large_is_given_up_at_once(plane, launch, tmp_path):
    plane.spec = spec(script_b64=script(SAVES))
    plane.upload_statuses = [413, 413]  # the checkpoint, then the adapter

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert len(plane.upload_tries) == 2  # one try each, no retries
    assert plane.uploads == []
    refused = [m for m in plane.messages("system") if m.startswith("could not upload the ")]
    assert len(refused) == 2 and all("HTTP 413" in m for m in refused)
    assert plane.exits[0]["exit_code"] == 0
