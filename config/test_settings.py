"""Settings for the test suite: the production settings module with test defaults filled in
from the environment (PostgreSQL and Redis on this machine) and a fast password hasher."""

import os
from pathlib import Path

# Under pytest-xdist each worker (gw0, gw1, ...) gets a Redis database and a var directory of
# its own (pytest-django gives it its own test database), so workers never flush, purge or
# overwrite each other's state. Child processes (the live stack, runners) inherit them.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# A serial run keeps db 15; workers take others, so a parallel run never meets a serial one.
# 14 is test_make_run's; 13, 9 and 7 are the benches' (never a test's), 0 `make run`'s.
SERIAL_REDIS_DB = 15
WORKER_REDIS_DBS = (12, 11, 10, 8, 6, 5, 4, 3, 2, 1)


def worker_redis_url(worker: str) -> str:
    """The Redis database of xdist worker `worker` (gw0, gw1, ...), or of a serial run ("")."""
    if not worker:
        return f"redis://127.0.0.1:6379/{SERIAL_REDIS_DB}"
    index = int(worker.removeprefix("gw"))
    if index >= len(WORKER_REDIS_DBS):
        raise RuntimeError(
            f"at most {len(WORKER_REDIS_DBS)} test workers (-n): no Redis db for {worker}"
        )
    return f"redis://127.0.0.1:6379/{WORKER_REDIS_DBS[index]}"


def worker_var_dir(worker: str) -> str:
    return str(Path(__file__).resolve().parents[1] / "var" / f"test-{worker or 'main'}")


# xdist's workers inherit the environment of the controller, which loaded these settings
# first: a worker replaces what the controller filled in (never what the user set). Other
# processes (a live stack, a runner) keep what they were given.
FILLED = {name for name in os.environ.get("TRAINYARD_TEST_FILLED", "").split(",") if name}
if WORKER and os.environ.get("TRAINYARD_TEST_FILLED_BY") != WORKER:
    for name in FILLED:
        os.environ.pop(name, None)
for name, value in (
    ("REDIS_URL", worker_redis_url(WORKER)),
    ("TRAINYARD_VAR_DIR", worker_var_dir(WORKER)),
):
    if name not in os.environ:
        os.environ[name] = value
        FILLED.add(name)
        os.environ["TRAINYARD_TEST_FILLED_BY"] = WORKER
os.environ["TRAINYARD_TEST_FILLED"] = ",".join(sorted(FILLED))

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/trainyard")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
os.environ.setdefault("SECRETS_KEYS", "dGVzdC1vbmx5LWZlcm5ldC1rZXktMDEyMzQ1Njc4OTA=")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
# No pool in the test process: pooled connections would keep the test database from being
# dropped at the end. The live stack's processes run with the pool, as production does.
os.environ.setdefault("DATABASE_POOL", "0")
# Three workers share two cores: a trainer or engine the suite starts (through the live
# stack's runners too) uses one thread, rather than each spinning a thread per core.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The suite's jobs run on the host runtime (the trainer needs the project's environment);
# the container tests configure podman on their own provider.
os.environ.setdefault("LOCAL_RUNTIME", "host")
# Tests are development: the host runtime may run workloads as the suite's own user.
os.environ.setdefault("LOCAL_HOST_RUNTIME_DEV_ONLY", "1")
# What podman needs on these machines (hybrid cgroups: crun fails, default ulimits refused).
os.environ.setdefault("CONTAINER_GLOBAL_ARGS", "--runtime runc --cgroup-manager=cgroupfs")
os.environ.setdefault("CONTAINER_RUN_ARGS", "--ulimit nofile=1024:4096 --ulimit nproc=1000:1000")

from config.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}  # noqa: F405
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405  (WhiteNoise warns when missing)
# Static files straight from the source folders: the live stack in tests runs no collectstatic.
WHITENOISE_USE_FINDERS = True
# Tests need no durability: a commit that does not wait for the WAL flush saves a few
# milliseconds on every transactional test and every runner batch the live stack writes.
if DATABASES["default"]["ENGINE"] in POSTGRESQL_ENGINES:  # noqa: F405
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"  # noqa: F405
# A flush after each transactional test empties the tables with DELETE, not TRUNCATE (about
# 50 times faster for a test's few rows: tests/postgresql). Not for the live stack's pooled
# processes, which never flush.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.postgresql"  # noqa: F405
