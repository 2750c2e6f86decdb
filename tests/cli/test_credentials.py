"""Where the CLI may take an API key from (never argv), and where it may send it (never in
clear to another host without `--insecure`)."""

from __future__ import annotations

import io
import json

import pytest

from tests.cli.conftest import KEY, URL

LOGGED_IN = "Logged in to"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def logged_out(monkeypatch, tmp_path):
    """No URL or key in the environment; the config file under tmp_path/xdg."""
    monkeypatch.delenv("TRAINYARD_URL")
    monkeypatch.delenv("TRAINYARD_API_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg/trainyard/config.json"


def _stdin(monkeypatch, text: str, *, tty: bool = False) -> None:
    monkeypatch.setattr("sys.stdin", (Terminal if tty else io.StringIO)(text))


# --- the key --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--api-key", KEY], [f"--api-key={KEY}"], ["--api-key"]])
def test_a_key_on_the_command_line_is_refused_naming_the_other_ways(
    cli, api, logged_out, capsys, argv
):
    assert cli("login", "--url", URL, *argv) == 2

    err = capsys.readouterr().err
    assert "--api-key is not accepted" in err
    assert "--api-key-stdin" in err and "TRAINYARD_API_KEY" in err and "prompt" in err
    assert KEY not in err
    assert api.requests == []
    assert not logged_out.exists()


def test_the_key_is_read_from_stdin_with_api_key_stdin(cli, api, logged_out, monkeypatch):
    _stdin(monkeypatch, KEY + "\n")

    assert cli("login", "--url", URL, "--api-key-stdin") == 0

    assert api.requests[-1].headers["Authorization"] == f"Bearer {KEY}"
    assert json.loads(logged_out.read_text()) == {"url": URL, "api_key": KEY}


def test_on_a_terminal_the_key_is_prompted_for_without_echo(cli, api, logged_out, monkeypatch):
    _stdin(monkeypatch, "", tty=True)
    prompts = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or KEY)

    assert cli("login", "--url", URL) == 0

    assert prompts == ["API key: "]
    assert api.requests[-1].headers["Authorization"] == f"Bearer {KEY}"


def test_the_key_may_come_from_the_environment(cli, api, logged_out, monkeypatch):
    monkeypatch.setenv("TRAINYARD_API_KEY", KEY)
    _stdin(monkeypatch, "")

    assert cli("login", "--url", URL) == 0

    assert json.loads(logged_out.read_text()) == {"url": URL, "api_key": KEY}


def test_piped_stdin_is_not_read_without_api_key_stdin(cli, api, logged_out, monkeypatch, capsys):
    _stdin(monkeypatch, KEY + "\n")

    assert cli("login", "--url", URL) == 2

    err = capsys.readouterr().err
    assert "--api-key-stdin" in err and "TRAINYARD_API_KEY" in err
    assert api.requests == []
    assert not logged_out.exists()


# --- plain http ------------------------------------------------------------------------------


def test_login_refuses_plain_http_to_another_host(cli, api, logged_out, monkeypatch, capsys):
    _stdin(monkeypatch, KEY + "\n")

    assert cli("login", "--url", "http://trainyard.example.com", "--api-key-stdin") == 2

    err = capsys.readouterr().err
    assert "Refusing plain http:// to trainyard.example.com" in err and "--insecure" in err
    assert api.requests == []
    assert not logged_out.exists()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://[::1]:8000", "http://localhost:8000"]
)
def test_plain_http_to_loopback_is_allowed(cli, api, logged_out, monkeypatch, url):
    _stdin(monkeypatch, KEY + "\n")

    assert cli("login", "--url", url, "--api-key-stdin") == 0

    assert json.loads(logged_out.read_text()) == {"url": url, "api_key": KEY}


def test_login_insecure_is_remembered_for_that_url_only(cli, api, logged_out, monkeypatch):
    remote = "http://trainyard.example.com"
    api.on("GET", "/api/v1/compute/jobs", {"data": [], "total": 0, "next_cursor": None})
    _stdin(monkeypatch, KEY + "\n")

    assert cli("login", "--url", remote, "--api-key-stdin", "--insecure") == 0
    assert json.loads(logged_out.read_text()) == {"url": remote, "api_key": KEY, "insecure": True}
    assert api.requests[-1].url.host == "trainyard.example.com"

    assert cli("jobs", "list", "--json") == 0  # the stored URL, its stored choice
    assert api.requests[-1].url.host == "trainyard.example.com"

    monkeypatch.setenv("TRAINYARD_URL", "http://other.example.com")
    sent = len(api.requests)
    assert cli("jobs", "list", "--json") == 2  # another URL: the choice does not carry over
    assert len(api.requests) == sent


def test_a_command_refuses_plain_http_from_the_environment(cli, api, monkeypatch, capsys):
    monkeypatch.setenv("TRAINYARD_URL", "http://trainyard.example.com")

    assert cli("jobs", "list") == 2

    assert "Refusing plain http://" in capsys.readouterr().err
    assert api.requests == []


@pytest.mark.parametrize(
    "argv", [["--insecure", "jobs", "list", "--json"], ["jobs", "list", "--json", "--insecure"]]
)
def test_insecure_before_or_after_the_command_allows_it(cli, api, monkeypatch, argv):
    monkeypatch.setenv("TRAINYARD_URL", "http://trainyard.example.com")
    api.on("GET", "/api/v1/compute/jobs", {"data": [], "total": 0, "next_cursor": None})

    assert cli(*argv) == 0

    assert [r.url.host for r in api.requests] == ["trainyard.example.com"]
