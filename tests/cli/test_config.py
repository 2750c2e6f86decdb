"""Where settings come from, and the config file `trainyard login` writes."""

from __future__ import annotations

import io
import json
import stat

import pytest

from tests.cli.conftest import KEY, URL, WHOAMI
from trainyard_cli import config


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_lives_under_xdg_config_home_or_dot_config(tmp_path):
    home = str(tmp_path)
    assert config.config_path({"HOME": home}) == tmp_path / ".config/trainyard/config.json"
    xdg = {"HOME": home, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert config.config_path(xdg) == tmp_path / "xdg/trainyard/config.json"
    relative = {"HOME": home, "XDG_CONFIG_HOME": "not/absolute"}  # invalid per the spec
    assert config.config_path(relative) == tmp_path / ".config/trainyard/config.json"


def test_save_writes_owner_only_and_load_reads_it_back(tmp_path):
    env = {"HOME": str(tmp_path)}
    path = config.save(config.Settings(url=URL, api_key=KEY), env)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert config.load(env) == config.Settings(url=URL, api_key=KEY)


def test_saving_over_a_world_readable_file_makes_it_owner_only(tmp_path):
    env = {"HOME": str(tmp_path)}
    path = config.config_path(env)
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    path.chmod(0o644)
    config.save(config.Settings(url=URL, api_key=KEY), env)
    assert _mode(path) == 0o600


def test_the_environment_wins_over_the_file(tmp_path):
    env = {"HOME": str(tmp_path)}
    config.save(config.Settings(url="https://file.test", api_key="ty_file"), env)
    env |= {"TRAINYARD_URL": "https://env.test/", "TRAINYARD_API_KEY": "ty_env"}
    assert config.load(env) == config.Settings(url="https://env.test", api_key="ty_env")


def test_no_settings_at_all_is_a_clear_error(tmp_path):
    with pytest.raises(config.ConfigError, match="trainyard login"):
        config.load({"HOME": str(tmp_path)})


def test_a_url_without_a_scheme_is_refused():
    with pytest.raises(config.ConfigError, match="http"):
        config.normalise_url("trainyard.example.com")


def test_the_key_never_shows_in_a_repr():
    assert KEY not in repr(config.Settings(url=URL, api_key=KEY))


def test_login_checks_the_key_then_writes_the_file(cli, api, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TRAINYARD_URL")
    monkeypatch.delenv("TRAINYARD_API_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))

    monkeypatch.setattr("sys.stdin", io.StringIO(KEY + "\n"))

    assert cli("login", "--url", URL + "/", "--api-key-stdin") == 0

    path = tmp_path / "xdg/trainyard/config.json"
    assert json.loads(path.read_text()) == {"url": URL, "api_key": KEY}
    assert _mode(path) == 0o600
    assert api.requests[-1].headers["Authorization"] == f"Bearer {KEY}"
    printed = capsys.readouterr()
    assert "Acme" in printed.err
    assert KEY not in printed.out + printed.err


def test_a_refused_key_writes_nothing(cli, api, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    refusal = {"error": {"type": "unauthenticated", "message": "Invalid API key.", "param": None}}
    api.on("GET", "/api/v1/whoami", refusal, status=401)

    monkeypatch.setattr("sys.stdin", io.StringIO(KEY + "\n"))

    assert cli("login", "--url", URL, "--api-key-stdin") == 2

    assert not (tmp_path / "xdg").exists()
    printed = capsys.readouterr()
    assert "Invalid API key." in printed.err
    assert KEY not in printed.out + printed.err
    assert WHOAMI  # (the fake's default answer was replaced for this test)
