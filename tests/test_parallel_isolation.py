"""The guard for running the suite on several pytest-xdist workers: no two workers share a
Redis database, a test database, a var directory or a port (tests/parallel.py). The
controller checks the same again at the end of the run, for ports taken later."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from config import test_settings
from tests import parallel
from tests.integration.stack import Stack
from tests.live import ROOT, wait_until

# Redis databases others use: `make run` (0), test_make_run and a bench (14), benches.
RESERVED_REDIS_DBS = {0, 7, 9, 13, 14}


def test_every_worker_of_the_largest_run_gets_its_own_redis_db_and_var_dir():
    workers = [f"gw{index}" for index in range(len(test_settings.WORKER_REDIS_DBS))]
    urls = [test_settings.worker_redis_url(worker) for worker in workers]
    dirs = [test_settings.worker_var_dir(worker) for worker in workers]
    assert len(set(urls)) == len(workers)
    assert len(set(dirs)) == len(workers)
    databases = {int(url.rsplit("/", 1)[1]) for url in urls}
    assert not databases & RESERVED_REDIS_DBS
    # Nor the serial run's, so a parallel run never flushes the Redis of a serial one.
    assert test_settings.worker_redis_url("") not in urls
    with pytest.raises(RuntimeError, match="at most 10 test workers"):
        test_settings.worker_redis_url(f"gw{len(workers)}")


@pytest.mark.django_db
def test_this_worker_uses_what_it_was_given(request):
    """The settings the tests run on are this worker's own, not a shared default."""
    worker = test_settings.WORKER
    assert test_settings.worker_redis_url(worker) == settings.REDIS_URL
    assert str(settings.VAR_DIR) == test_settings.worker_var_dir(worker)
    if worker:
        assert connection.settings_dict["NAME"].endswith(f"_{worker}")
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "off"


def test_no_two_workers_hold_the_same_redis_db_test_database_var_dir_or_port(request):
    config = request.config
    if not hasattr(config, "workerinput"):
        # A serial run: one process, so nothing to share; its own record is still whole.
        own = {"main": {"redis_url": [settings.REDIS_URL], "var_dir": [str(settings.VAR_DIR)]}}
        assert parallel.shared(own) == []
        return
    count = config.workerinput["workercount"]
    held = wait_until(
        lambda: (found := parallel.registrations(config)) and len(found) == count and found,
        timeout=120,
        interval=0.5,
        what=f"all {count} workers to record what they hold",
    )
    assert parallel.shared(held) == []
    for kind in ("redis_url", "test_database", "var_dir"):
        assert all(resources.get(kind) for resources in held.values()), kind


def test_the_guard_names_what_two_workers_share():
    held = {
        "gw0": {"redis_url": ["redis://127.0.0.1:6379/15"], "port": [41000]},
        "gw1": {"redis_url": ["redis://127.0.0.1:6379/15"], "port": [41001]},
    }
    assert parallel.shared(held) == ["redis_url redis://127.0.0.1:6379/15: gw0, gw1"]


def test_a_stack_process_keeps_the_redis_db_and_var_dir_its_worker_gives_it(tmp_path):
    """The live stack's processes load the test settings too, without xdist's variables:
    they must keep the worker's Redis db (their broker) and their own var dir."""
    given = "redis://127.0.0.1:6379/3"
    stack = Stack(
        database_url="postgres://postgres@127.0.0.1:5432/x", redis_url=given, workdir=tmp_path
    )
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.REDIS_URL, s.CELERY_BROKER_URL, s.VAR_DIR)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=stack.env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [given, given, str(tmp_path / "var")]


@pytest.fixture(scope="module")
def _module_scoped() -> str:
    return "built once for this module"


def test_a_test_with_a_module_fixture_is_sent_as_part_of_its_modules_group(request, _module_scoped):
    """Under xdist the group is the work unit, carried in the test's id (`@<group>`): if it
    were lost, module fixtures and shared daemons would be set up on several workers."""
    group = "module:tests/test_parallel_isolation.py"
    assert request.node.stash[parallel.GROUP_KEY] == group
    loadgroup = hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup")
    assert request.node.nodeid.endswith(f"@{group}") == bool(loadgroup)


def test_no_bench_flushes_a_redis_database_a_test_uses():
    """Every bench flushes its Redis database when it starts; one run during a test run must
    never empty a worker's, the serial run's or the `make run` test's."""
    tests_use = {test_settings.SERIAL_REDIS_DB, *test_settings.WORKER_REDIS_DBS, 14, 0}
    defaults = {
        path.name: int(match.group(1))
        for path in sorted((ROOT / "bench").glob("bench_*.py"))
        for match in re.finditer(r'REDIS_URL", "redis://127\.0\.0\.1:6379/(\d+)"', path.read_text())
    }

    assert len(defaults) >= 10  # the benches that start processes were found
    assert {name: db for name, db in defaults.items() if db in tests_use} == {}
