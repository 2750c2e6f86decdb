"""docker-compose.yml and .env.example stay in step with the settings module."""

import re
from pathlib import Path

import yaml

from config.env import names_read

ROOT = Path(__file__).resolve().parents[2]
APP_SERVICES = {"web", "worker", "beat", "ssh"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_it_names_its_services_each_with_a_healthcheck():
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
    gateway = _compose()["services"]["ssh"]
    # Published on the port it listens on, which is the port the job page and API show.
    assert gateway["ports"] == ["${TRAINYARD_BIND:-127.0.0.1}:2222:2222"]
    assert gateway["command"] == ["python", "manage.py", "ssh_gateway"]


def _no_default(value: str, name: str) -> None:
    """`value` takes NAME from the environment and compose stops when it is unset."""
    assert "${" + name + ":?" in value, value
    assert "${" + name + ":-" not in value and "${" + name + "}" not in value, value


def test_postgres_requires_a_password_from_the_environment_and_never_trusts():
    services = _compose()["services"]
    postgres = services["postgres"]["environment"]
    _no_default(postgres["POSTGRES_PASSWORD"], "POSTGRES_PASSWORD")
    assert postgres["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    assert "--auth-local=scram-sha-256" in postgres["POSTGRES_INITDB_ARGS"]
    database_url = _compose()["x-trainyard-env"]["DATABASE_URL"]
    assert database_url.startswith("postgres://trainyard:${POSTGRES_PASSWORD:?")
    _no_default(database_url, "POSTGRES_PASSWORD")
    text = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"\btrust\b", text, flags=re.IGNORECASE)  # the auth method
    assert "trainyard:trainyard@" not in text


def test_redis_requires_a_password_from_the_environment():
    redis = _compose()["services"]["redis"]
    _no_default(redis["environment"]["REDIS_PASSWORD"], "REDIS_PASSWORD")
    command = " ".join(redis["command"])
    assert "requirepass" in command and "$$REDIS_PASSWORD" in command
    # A healthcheck that sends the password (an unauthenticated PING is refused).
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])
    redis_url = _compose()["x-trainyard-env"]["REDIS_URL"]
    assert redis_url.startswith("redis://:${REDIS_PASSWORD:?")
    _no_default(redis_url, "REDIS_PASSWORD")


def test_no_password_has_a_default_anywhere_in_the_file():
    text = (ROOT / "docker-compose.yml").read_text()
    for name in re.findall(r"\$\{([A-Z_]*(?:PASSWORD|SECRET|KEY)[A-Z_]*)", text):
        assert not re.search(r"\$\{" + name + r":?-", text), name


def test_the_worker_runs_jobs_in_containers_after_checking_the_runtime():
    """Never the host runtime as the control plane's own user (issue 36 part 4), and the
    same runtime check `make run` does before Celery starts."""
    env = _compose()["x-trainyard-env"]
    assert env["LOCAL_RUNTIME"] == "${LOCAL_RUNTIME:-docker}"
    assert env["LOCAL_HOST_RUNTIME_DEV_ONLY"] == "${LOCAL_HOST_RUNTIME_DEV_ONLY:-0}"
    worker = _compose()["services"]["worker"]
    assert "${CONTAINER_SOCKET:-/var/run/docker.sock}:/var/run/docker.sock" in worker["volumes"]
    jobs = "${TRAINYARD_JOBS_DIR:-/var/lib/trainyard-jobs}"
    assert f"{jobs}:{jobs}" in worker["volumes"]  # the same path on the host and in here
    assert env["LOCAL_WORK_DIR"].startswith(jobs)
    command = " ".join(worker["command"])
    assert "manage.py check_runtime --exec celery -A config worker" in command
