"""docker-compose.yml and .env.example stay in step with the settings module."""

import re
from pathlib import Path

import yaml

from config.env import names_read

ROOT = Path(__file__).resolve().parents[2]
APP_SERVICES = {"web", "worker", "beat"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_it_names_the_five_services_each_with_a_healthcheck():
    services = _compose()["services"]
    assert set(services) == {"postgres", "redis", *APP_SERVICES}
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test")
        assert test, f"{name} has no healthcheck"


def test_app_services_wait_for_healthy_postgres_and_redis():
    services = _compose()["services"]
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        assert depends == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }, name


def test_app_services_get_every_variable_settings_read():
    read = set(names_read())
    assert {
        "DATABASE_URL",
        "REDIS_URL",
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "DEBUG",
        "SECRETS_KEYS",
    } <= read
    services = _compose()["services"]
    for name in APP_SERVICES:
        assert set(services[name]["environment"]) == read, name


def test_env_example_documents_every_variable_settings_read():
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))
    assert documented == set(names_read())


def test_it_refuses_to_start_without_real_keys():
    """`${NAME:?message}`: compose stops with the message when the variable is unset."""
    text = (ROOT / "docker-compose.yml").read_text()
    for name in ("SECRET_KEY", "SECRETS_KEYS"):
        value = _compose()["x-trainyard-env"][name]
        assert value.startswith("${" + name + ":?"), value
    assert "change-me" not in text


def test_the_web_port_is_published_on_loopback_unless_told_otherwise():
    ports = _compose()["services"]["web"]["ports"]
    assert ports == ["${TRAINYARD_BIND:-127.0.0.1}:8000:8000"]
