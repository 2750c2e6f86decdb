"""The connection pool after the database ended every connection at once (a restart, a
failover): the next request gets a working connection at once, not a 500 after the pool's
timeout."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend
from psycopg_pool import ConnectionPool

import config.settings as production_settings

pytestmark = pytest.mark.django_db

IDLE = 6  # enough ended connections that one-at-a-time discovery outwaits the timeout


def _production_pool(monkeypatch) -> tuple[BaseDatabaseWrapper, ConnectionPool]:
    """The pool production settings give Django (its backend and options), on the test
    database, under an alias of its own."""
    monkeypatch.setattr(production_settings, "DATABASE_POOL", True)
    name = connection.settings_dict["NAME"]
    config = production_settings._database_config(f"postgres://postgres@127.0.0.1:5432/{name}")
    wrapper_class = load_backend(config["ENGINE"]).DatabaseWrapper
    wrapper = wrapper_class({**connection.settings_dict, **config}, alias="pool-under-test")
    pool = wrapper.pool
    pool.open()
    return wrapper, pool


def _terminate(pids: list[int]) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM unnest(%s) AS pid", [pids])
        return cursor.fetchone()[0]


def test_a_pool_whose_connections_the_database_all_ended_serves_a_working_one(monkeypatch):
    wrapper, pool = _production_pool(monkeypatch)
    try:
        held = [pool.getconn() for _ in range(IDLE)]
        pids = [conn.info.backend_pid for conn in held]
        for conn in held:
            pool.putconn(conn)
        assert _terminate(pids) == IDLE

        # Found one by one, the pool waits 1 + 2 + 4 + 8 s before a fifth try: past 10 s.
        conn = pool.getconn(timeout=10)
        try:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.info.backend_pid not in pids
        finally:
            pool.putconn(conn)
        assert pool.get_stats().get("connections_lost", 0) >= IDLE - 1
    finally:
        wrapper.close_pool()


def test_the_pool_keeps_what_the_urls_query_asks_for_sslmode_included(monkeypatch):
    """`?sslmode=require` (a managed database's URL) reaches psycopg with the pool on: it was
    dropped, and the connection went out unencrypted."""
    monkeypatch.setattr(production_settings, "DATABASE_POOL", True)
    name = connection.settings_dict["NAME"]
    url = f"postgres://postgres@127.0.0.1:5432/{name}?sslmode=disable&application_name=ty-web"
    config = production_settings._database_config(url)
    assert config["OPTIONS"]["sslmode"] == "disable"
    assert config["OPTIONS"]["pool"]["max_size"] == production_settings.DATABASE_POOL_SIZE
    wrapper_class = load_backend(config["ENGINE"]).DatabaseWrapper
    wrapper = wrapper_class({**connection.settings_dict, **config}, alias="pool-with-options")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT current_setting('application_name')")
            assert cursor.fetchone()[0] == "ty-web"  # the query's options reach the server
    finally:
        wrapper.close_pool()
