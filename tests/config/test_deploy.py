"""Production settings are only environment values; with them `check --deploy` is clean."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "a6Jq0v!x9r@L2m#Tz8wE$u4bN7pK^c1sY5dF&h3gR*eW0oQiZ-yUtVnMjXlBkCaS",
    "SECRETS_KEYS": "cHJvZC10ZXN0LWZlcm5ldC1rZXktMDEyMzQ1Njc4OTA=",
    "ALLOWED_HOSTS": "trainyard.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/trainyard",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SECURE_"))}
    clean.pop("DEBUG", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_passes_with_production_values():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_fails_when_debug_is_left_on():
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING", env={**PRODUCTION_ENV, "DEBUG": "1"}
    )
    assert result.returncode != 0
    assert "DEBUG" in result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECRET_KEY"}
    result = _manage("check", env={**env, "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def _debug_seen_by_manage_py(env: dict[str, str]) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DJANGO_") and k not in {"DEBUG", "SECRET_KEY", "SECRETS_KEYS"}
    }
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings; print(settings.DEBUG)",
        ],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_manage_py_with_nothing_configured_is_a_development_tool():
    assert _debug_seen_by_manage_py({}) == "True"


def test_manage_py_keeps_debug_off_wherever_a_secret_key_is_set():
    env = {
        "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
        "SECRETS_KEYS": PRODUCTION_ENV["SECRETS_KEYS"],
    }
    assert _debug_seen_by_manage_py(env) == "False"
