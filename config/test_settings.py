"""Settings for the test suite: the production settings module with test defaults filled in
from the environment (PostgreSQL and Redis on this machine) and a fast password hasher."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/trainyard")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
os.environ.setdefault("SECRETS_KEYS", "dGVzdC1vbmx5LWZlcm5ldC1rZXktMDEyMzQ1Njc4OTA=")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
# No pool in the test process: pooled connections would keep the test database from being
# dropped at the end. The live stack's processes run with the pool, as production does.
os.environ.setdefault("DATABASE_POOL", "0")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")  # apart from `make run` (db 0)
# The suite's jobs run on the host runtime (the trainer needs the project's environment);
# the container tests configure podman on their own provider.
os.environ.setdefault("LOCAL_RUNTIME", "host")
# Tests are development: the host runtime may run workloads as the suite's own user.
os.environ.setdefault("LOCAL_HOST_RUNTIME_DEV_ONLY", "1")
# What podman needs on these machines (hybrid cgroups: crun fails, default ulimits refused).
os.environ.setdefault("CONTAINER_GLOBAL_ARGS", "--runtime runc --cgroup-manager=cgroupfs")
os.environ.setdefault("CONTAINER_RUN_ARGS", "--ulimit nofile=1024:4096 --ulimit nproc=1000:1000")

from config.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}  # noqa: F405
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405  (WhiteNoise warns when missing)
# Static files straight from the source folders: the live stack in tests runs no collectstatic.
WHITENOISE_USE_FINDERS = True
