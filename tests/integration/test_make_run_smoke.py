"""Start the real ASGI server the way `make run` does (migrate, seed_demo, collectstatic,
then the Procfile's `web` process under `manage.py runstack`), sign in through the login form
and read the project list. Run once on the embedded SQLite default and once on PostgreSQL."""

from __future__ import annotations

import re
import sys
import uuid

import psycopg
import pytest
import requests

from tests.live import base_env, free_port, manage, process_group, wait_until, with_demo_model

pytestmark = pytest.mark.live


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request):
    if request.param == "sqlite":
        yield ""  # unset: the embedded default under TRAINYARD_VAR_DIR
        return
    name = f"trainyard_smoke_{uuid.uuid4().hex[:8]}"
    admin = "postgres://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def test_sign_in_and_see_the_project_list_on_the_real_server(tmp_path, database_url, tiny_model):
    port = free_port()
    with_demo_model(tmp_path / "var", tiny_model)  # built by make run's own test
    env = base_env(
        DEBUG="1",
        TRAINYARD_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=database_url,
        WEB_PORT=str(port),
        DEMO_PASSWORD="smoke-test-password",
    )
    env.pop("SECRET_KEY", None)
    env.pop("SECRETS_KEYS", None)
    manage("migrate", "--noinput", env=env)
    seeded = manage("seed_demo", env=env).stdout
    assert f"sign in at http://127.0.0.1:{port}/ as demo / smoke-test-password" in seeded
    assert "(unless it was changed since)" in manage("seed_demo", env=env).stdout
    manage("collectstatic", "--noinput", env=env)

    base = f"http://127.0.0.1:{port}"
    with process_group(
        [sys.executable, "manage.py", "runstack", "web"], env=env, log=tmp_path / "web.log"
    ) as proc:
        wait_until(
            lambda: _answers(f"{base}/healthz") or proc.poll() is not None,
            timeout=30,
            what="the web server",
        )
        assert proc.poll() is None, (tmp_path / "web.log").read_text()

        session = requests.Session()
        login = session.get(f"{base}/accounts/login/", timeout=5)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        response = session.post(
            f"{base}/accounts/login/",
            data={
                "username": "demo",
                "password": "smoke-test-password",
                "csrfmiddlewaretoken": token,
            },
            headers={"Referer": f"{base}/accounts/login/"},
            timeout=5,
        )
        assert response.status_code == 200
        assert response.url == f"{base}/o/demo/"  # the overview is the home page
        assert "Spent this month" in response.text
        assert "Getting started" in session.get(f"{base}/o/demo/projects/", timeout=5).text
        assert session.get(f"{base}/static/css/app.css", timeout=5).status_code == 200
        assert session.get(f"{base}/static/vendor/htmx-2.0.11.min.js", timeout=5).ok
