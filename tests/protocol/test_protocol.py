"""The runner protocol's code contract (`runner/protocol.py`): version parsing, what the
runner does with a version it does not speak, and that `runner` and `trainer` stay free of
the control plane's code. End to end tests run `python -m runner` against
tests/runner/peer.py, like tests/runner/test_agent.py."""

from __future__ import annotations

import ast
import hashlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from runner import protocol
from runner.client import (
    ControlClient,
    FatalError,
    Outcome,
    RetryableError,
    UnsupportedProtocolError,
    call_with_retry,
    classify,
)
from runner.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    Order,
    supported,
    version_of_header,
    version_of_spec,
)
from runner.spec import JobSpec
from tests.runner.peer import HttpServer

# test_agent.py's fixtures `launch` and `plane` are imported to be used as fixtures, which
# ruff reads as a redefinition in every test that takes them.
# ruff: noqa: F811
from tests.runner.test_agent import (  # noqa: F401
    _runner_log,
    assert_complete,
    launch,
    plane,
    script,
    spec,
)
from trainer.formats import FORMAT_CHOICES, FORMATS

REPO = Path(__file__).resolve().parents[2]
UNSUPPORTED = {"error": {"type": "unsupported_protocol", "message": "Upgrade.", "param": None}}

# -- versions ----------------------------------------------------------------------------


def test_today_is_version_1():
    assert PROTOCOL_VERSION == 1
    assert PROTOCOL_HEADER == "X-Trainyard-Protocol"


@pytest.mark.parametrize(
    ("version", "expected"),
    [(1, True), (PROTOCOL_VERSION, True), (0, False), (-1, False), (PROTOCOL_VERSION + 1, False)],
)
def test_supported_is_1_to_the_current_version(version, expected):
    assert supported(version) is expected


@pytest.mark.parametrize("version", [True, False, None, "1", 1.0])
def test_supported_refuses_what_is_not_a_whole_number(version):
    assert supported(version) is False


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, 1),  # an older runner sends none
        ("1", 1),
        (" 2 ", 2),
        ("0", 0),
        ("17", 17),
        ("", None),
        ("abc", None),
        ("1.0", None),
        ("-1", None),
        ("+1", None),
        ("1, 2", None),
        ("\u0661", None),  # an Arabic-Indic digit one
    ],
)
def test_version_of_header(header, expected):
    assert version_of_header(header) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({}, 1),  # an older control plane sends no protocol_version
        ({"protocol_version": None}, 1),
        ({"protocol_version": 1}, 1),
        ({"protocol_version": 2}, 2),
        ({"protocol_version": "1"}, None),
        ({"protocol_version": True}, None),
        ({"protocol_version": 1.5}, None),
    ],
)
def test_version_of_spec_and_the_job_spec(answer, expected):
    assert version_of_spec(answer) == expected
    assert JobSpec.from_json(answer).protocol_version == expected


# -- the contract's values ----------------------------------------------------------------


def test_the_contract_values():
    assert [order.value for order in Order] == ["continue", "terminate", "checkpoint_and_exit"]
    assert Order.TERMINATE == "terminate" == protocol.ORDER_TERMINATE
    exits = (
        protocol.EXIT_OK,
        protocol.EXIT_REFUSED,
        protocol.EXIT_CONFIG,
        protocol.EXIT_GRADING_FAILED,
        protocol.EXIT_NO_INPUT,
        protocol.EXIT_UNREPORTED,
        protocol.EXIT_LOCKED,
        protocol.EXIT_CANNOT_EXECUTE,
        protocol.EXIT_NOT_FOUND,
        protocol.EXIT_SIGTERM,
    )
    assert exits == (0, 1, 2, 3, 66, 69, 75, 126, 127, 143)
    lines = (protocol.LINE_METRICS, protocol.LINE_CHECKPOINT, protocol.LINE_GRADING)
    assert (*lines, protocol.LINE_ADAPTER, protocol.LINE_MERGED) == (
        "metrics",
        "checkpoint",
        "grading",
        "adapter",
        "merged",
    )
    assert frozenset({"checkpoint", "adapter", "merged"}) == protocol.ARTIFACT_LINE_TYPES
    assert protocol.SHA256_HEADER == "X-Trainyard-SHA256"
    assert protocol.ENV_RESUME_FROM == "TRAINYARD_RESUME_FROM"
    assert protocol.ENV_CHECKPOINT_DIR == "TRAINYARD_CHECKPOINT_DIR"
    assert set(protocol.SpecResponse.__annotations__) >= {"protocol_version", "inputs"}


def test_the_dataset_formats_and_their_labels():
    assert FORMAT_CHOICES == [
        ("alpaca", "Alpaca"),
        ("chatml", "ChatML"),
        ("sharegpt", "ShareGPT"),
        ("prompt_completion", "Prompt-completion"),
        ("text", "Plain text"),
        ("pretokenized", "Pre-tokenized"),
    ]
    assert FORMATS == ("alpaca", "chatml", "sharegpt", "prompt_completion", "text", "pretokenized")


# -- what runner and trainer may import ---------------------------------------------------


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("package", ["runner", "trainer"])
def test_runner_and_trainer_never_import_the_control_plane(package):
    for path in sorted((REPO / package).rglob("*.py")):
        for module in _imported_modules(path):
            top = module.split(".")[0]
            assert top not in {"apps", "config", "django"}, f"{path} imports {module}"
            if package == "trainer" and top == "runner":
                assert module == "runner.protocol", f"{path} imports {module}"


def test_the_protocol_imports_only_the_standard_library():
    for module in _imported_modules(REPO / "runner" / "protocol.py"):
        assert module.split(".")[0] in sys.stdlib_module_names or module == "__future__", module


def test_the_formats_and_the_protocol_import_without_torch():
    code = (
        "import sys, runner.protocol, trainer.formats, trainer.config, trainer.demo_data\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch', 'transformers', 'django', 'apps', 'config'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- the client ---------------------------------------------------------------------------


@pytest.fixture
def server():
    seen: list[tuple[str, str, dict]] = []
    answers: dict[str, tuple[int, object]] = {}

    def handle(method, path, headers, body):
        seen.append((method, path, {name.lower(): value for name, value in headers.items()}))
        return answers.get(path.rsplit("/", 1)[-1], (200, {"order": "continue"}))

    srv = HttpServer(handle).start()
    srv.seen = seen
    srv.answers = answers
    yield srv
    srv.stop()


def test_the_client_sends_the_protocol_header_on_every_kind_of_request(server, tmp_path):
    client = ControlClient(server.url, "job_x", "tok")
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"not really gzip")
    client.get_spec()
    client.post_heartbeat(1)
    client.upload_artifact("checkpoint", 3, str(archive), "0" * 64)
    with open(tmp_path / "out", "w+b") as out:
        client.download("/api/v1/runner/jobs/job_x/datasets/ds_1/download", out)

    assert len(server.seen) == 4
    for _, _, headers in server.seen:
        assert headers[PROTOCOL_HEADER.lower()] == str(PROTOCOL_VERSION)


def test_unsupported_protocol_is_fatal_and_not_retried(server):
    assert classify(400, UNSUPPORTED) is Outcome.FATAL
    assert classify(400, {"error": {"type": "invalid_request"}}) is Outcome.RETRY
    server.answers["spec"] = (400, UNSUPPORTED)
    client = ControlClient(server.url, "job_x", "tok")

    with pytest.raises(UnsupportedProtocolError, match="unsupported_protocol") as caught:
        call_with_retry(client.get_spec, sleep=pytest.fail)
    assert isinstance(caught.value, FatalError)
    assert caught.value.status == 400
    assert len(server.seen) == 1


def test_another_400_is_still_retried(server):
    server.answers["heartbeat"] = (400, {"error": {"type": "invalid_request"}})
    with pytest.raises(RetryableError):
        ControlClient(server.url, "job_x", "tok").post_heartbeat(1)


# -- the runner end to end -----------------------------------------------------------------


@pytest.mark.parametrize("version", [PROTOCOL_VERSION + 1, 0, "one"])
def test_the_runner_refuses_a_spec_of_a_version_it_does_not_speak(plane, launch, tmp_path, version):
    plane.spec = spec(command=["sh", "-c", "touch started-anyway"], protocol_version=version)

    runner = launch(plane)

    assert runner.wait(10) == 2, _runner_log(tmp_path)
    assert plane.spec_fetches == 1
    assert plane.started == [] and plane.exits == [] and plane.lines == {}
    assert not (tmp_path / "attempt" / "work" / "started-anyway").exists()
    assert not (tmp_path / "attempt" / "exit.json").exists()
    assert "protocol version" in _runner_log(tmp_path)


@pytest.mark.parametrize("version", [PROTOCOL_VERSION, None, "absent"])
def test_the_runner_runs_a_spec_of_its_version_or_of_none(plane, launch, tmp_path, version):
    plane.spec = spec(command=["sh", "-c", "echo ran; exit 4"], protocol_version=version)
    if version == "absent":
        del plane.spec["protocol_version"]

    runner = launch(plane)

    assert runner.wait(20) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert "ran" in plane.messages("user")
    assert plane.exits[0]["exit_code"] == 4


def test_a_control_plane_that_refuses_the_runners_version_gets_exit_2(plane, launch, tmp_path):
    plane.spec = spec(command=["sh", "-c", "touch started-anyway"])
    plane.spec_status = (400, UNSUPPORTED)

    runner = launch(plane)

    assert runner.wait(10) == 2, _runner_log(tmp_path)
    assert plane.spec_fetches == 1  # not retried
    assert plane.started == [] and plane.exits == []
    assert not (tmp_path / "attempt" / "work" / "started-anyway").exists()
    assert "unsupported_protocol" in _runner_log(tmp_path)


SAVES_AND_WAITS = r"""
ck="$PWD/$TRAINYARD_CHECKPOINT_DIR"
mkdir -p "$ck/checkpoint-1"
echo weights > "$ck/checkpoint-1/model.bin"
echo '{"type": "checkpoint", "step": 1, "path": "'"$ck"'/checkpoint-1"}'
cat data/input.txt
sleep 0.6
"""


def test_the_runner_sends_the_protocol_header_on_every_request(plane, launch, tmp_path):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("state.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    checkpoint = raw.getvalue()
    job_path = f"/api/v1/runner/jobs/{plane.job_id}"
    plane.downloads[f"{job_path}/artifacts/1/download"] = checkpoint
    plane.downloads[f"{job_path}/datasets/ds_1/download"] = b"the input\n"
    plane.spec = spec(
        script_b64=script(SAVES_AND_WAITS),
        resume_from={
            "artifact_id": "art_1",
            "step": 1,
            "sha256": hashlib.sha256(checkpoint).hexdigest(),
            "download_url": f"{job_path}/artifacts/1/download",
        },
        inputs=[
            {
                "path": "data/input.txt",
                "download_url": f"{job_path}/datasets/ds_1/download",
                "sha256": hashlib.sha256(b"the input\n").hexdigest(),
                "size_bytes": 10,
            }
        ],
    )

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert "the input" in plane.messages("user")
    assert len(plane.uploads) == 1
    endpoints = {endpoint.partition("?")[0] for _, endpoint, _ in plane.requests}
    assert endpoints >= {
        "spec",
        "artifacts/1/download",
        "datasets/ds_1/download",
        "started",
        "logs",
        "heartbeat",
        "artifacts",
        "exit",
    }
    for method, endpoint, headers in plane.requests:
        assert headers.get(PROTOCOL_HEADER.lower()) == str(PROTOCOL_VERSION), (method, endpoint)
