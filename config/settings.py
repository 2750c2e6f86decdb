"""Trainyard settings. Everything that differs between machines comes from the environment
(see `.env.example`); production differs from development only by those values.

Defaults are for a developer's laptop: SQLite under `var/` (the embedded default of
`make run`) unless `DATABASE_URL` is set, and `make run`'s own Redis (a Unix socket and a
password under `var/`) unless `REDIS_URL` is set.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import local_redis
from config.env import env_bool, env_float, env_int, env_list, env_str
from config.storage import default_storage_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("TRAINYARD_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", default=False)

_DEV_SECRET_KEY = "django-insecure-trainyard-development-only"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "apps.core",
    "apps.accounts",
    "apps.projects",
    "apps.catalog",
    "apps.billing",
    "apps.providers",
    "apps.jobs",
    "apps.hub",
    "apps.finetunes",
    "apps.sweeps",
    "apps.serving",
    "apps.playground",
    "apps.secrets",
    "apps.workdirs",
    "apps.webhooks",
]

MIDDLEWARE = [
    "apps.core.middleware.ApiJsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.core.static_files.StaticFilesMiddleware",  # WhiteNoise, async as well
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.core.middleware.SyncChainMiddleware",  # last: the chain runs sync (see it)
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context_processors.organizations",
            ],
            "builtins": ["apps.core.template_filters", "apps.jobs.templatetags.job_words"],
        },
    },
]


DATABASE_POOL = env_bool("DATABASE_POOL", True)
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 8)
POSTGRESQL_ENGINES = ("django.db.backends.postgresql", "config.postgresql")
POOLED_POSTGRESQL_ENGINE = "config.postgresql"
# At most this many runner-protocol requests (spec, started, heartbeat, logs, exit) run at
# once per web process; the rest wait up to RUNNER_QUEUE_TIMEOUT_S, then get 503
# `overloaded`, which runners retry (config/admission.py). Default: the pool less two.
RUNNER_MAX_CONCURRENT = env_int("RUNNER_MAX_CONCURRENT", max(1, DATABASE_POOL_SIZE - 2))
RUNNER_QUEUE_TIMEOUT_S = env_float("RUNNER_QUEUE_TIMEOUT_S", 10.0)
# A runner request takes its turn only once its body has arrived: within this many seconds
# of its headers, else 408 `request_timeout`; and at most RUNNER_MAX_PENDING_PER_CLIENT of
# them from one client address may still be sending at once, else 429 (config/admission.py).
RUNNER_BODY_TIMEOUT_S = env_float("RUNNER_BODY_TIMEOUT_S", 15.0)
RUNNER_MAX_PENDING_PER_CLIENT = env_int("RUNNER_MAX_PENDING_PER_CLIENT", 32)


def _database_config(url: str) -> dict:
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{VAR_DIR / 'trainyard.sqlite3'}"
    config = dj_database_url.parse(url, conn_health_checks=True)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets the web server read while the worker writes; IMMEDIATE transactions and a
        # busy timeout turn lock contention into a short wait instead of "database is locked".
        config["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    elif config["ENGINE"] == "django.db.backends.postgresql" and DATABASE_POOL:
        # A connection pool per process: ASGI and Celery open a connection per request or
        # task otherwise. CONN_MAX_AGE must stay 0 with a pool. Each connection is checked as
        # it leaves the pool (an empty query), so one that a database restart or
        # pg_terminate_backend ended is replaced, not handed to a request (a 500); a failed
        # check sweeps the whole pool (config/db_pool.py, through the backend in
        # config/postgresql, since Django's own backend fixes the pool's check).
        config["ENGINE"] = POOLED_POSTGRESQL_ENGINE
        # Beside what the URL's query asks for (sslmode, sslrootcert, options ...).
        pool = {"min_size": 1, "max_size": DATABASE_POOL_SIZE}
        config["OPTIONS"] = {**config.get("OPTIONS", {}), "pool": pool}
        config["CONN_MAX_AGE"] = 0
    return config


DATABASES = {"default": _database_config(env_str("DATABASE_URL", ""))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Unset: `make run`'s own Redis, on a Unix socket under VAR_DIR with a password kept there
# (config/local_redis.py; `manage.py ensure_redis` starts it). Set: that Redis, which should
# require a password too (redis://:PASSWORD@host:6379/0).
REDIS_OWN = not env_str("REDIS_URL", "")
REDIS_URL = env_str("REDIS_URL", "") or local_redis.url(VAR_DIR)

# The channel layer's Redis connections read without a socket timeout. A socket's consumer
# waits for its pushes with a blocking pop of 5 s (channels_redis' `brpop_timeout`), which
# bounds every read; redis-py 8's default socket timeout (5 s) cut that wait short and the
# consumer died without disconnecting. Any socket timeout also makes redis-py send under
# `asyncio.wait_for`, which on Python 3.11 swallows a cancel landing mid-send: the receive of
# a page that went away then popped every 5 s forever and its consumer never ended. Connects
# still time out, and keepalive notices a peer that vanished.
CHANNEL_LAYER_CONNECT_TIMEOUT_S = 5
CHANNEL_LAYER_HOST = local_redis.channel_layer_host(
    REDIS_URL, connect_timeout_s=CHANNEL_LAYER_CONNECT_TIMEOUT_S
)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [CHANNEL_LAYER_HOST],
            "prefix": "trainyard:asgi",
        },
    }
}

# Celery: at-least-once delivery. Tasks are short and idempotent; a task that dies with its
# worker is redelivered rather than lost.
CELERY_BROKER_URL = local_redis.celery_broker_url(REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90
# Must stay above the longest task's time limit, or Redis redelivers a task still running.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes the worker's connection pool around every task unless this is
# set; the worker returns connections to its pool instead (config/celery.py). It counts tasks
# between closes: this many is never.
CELERY_DB_REUSE_MAX = 10**12

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
WHITENOISE_USE_FINDERS = DEBUG
# Uploaded datasets and stored artifacts (checkpoints, adapters) go through Django's storage
# API. STORAGE_BACKEND picks where: "filesystem" (MEDIA_ROOT, the default) or "s3" (any
# S3-compatible object store; see config/storage.py and docs/configuration.md, "Storage").
STORAGE_BACKEND = env_str("STORAGE_BACKEND", "filesystem")
S3_BUCKET = env_str("S3_BUCKET", "")
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL", "")
S3_REGION = env_str("S3_REGION", "")
S3_ACCESS_KEY_ID = env_str("S3_ACCESS_KEY_ID", "")
S3_SECRET_ACCESS_KEY = env_str("S3_SECRET_ACCESS_KEY", "")
STORAGES = {
    "default": default_storage_config(
        STORAGE_BACKEND,
        bucket=S3_BUCKET,
        endpoint_url=S3_ENDPOINT_URL,
        region=S3_REGION,
        access_key_id=S3_ACCESS_KEY_ID,
        secret_access_key=S3_SECRET_ACCESS_KEY,
    ),
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(VAR_DIR / "media")))
MEDIA_URL = "media/"
# The largest dataset file a project may upload (bytes); every row is checked on upload.
DATASET_MAX_BYTES = env_int("DATASET_MAX_BYTES", 50 * 1024 * 1024)
# The largest artifact (a checkpoint or adapter tar.gz) a runner may upload (bytes).
ARTIFACT_MAX_BYTES = env_int("ARTIFACT_MAX_BYTES", 5 * 1024**3)
# The largest code archive (`POST /api/v1/compute/workdirs`, a job's container.workdir) and
# the most its members may unpack to (bytes).
WORKDIR_MAX_BYTES = env_int("WORKDIR_MAX_BYTES", 100 * 1024 * 1024)
WORKDIR_MAX_UNPACKED_BYTES = env_int("WORKDIR_MAX_UNPACKED_BYTES", 2 * 1024**3)
# The hub (apps/hub): the largest file one commit may add, and the largest commit body (the
# stock client sends every file inline, base64-encoded: a third larger than the files).
HUB_MAX_FILE_BYTES = env_int("HUB_MAX_FILE_BYTES", 2 * 1024**3)
HUB_MAX_COMMIT_BYTES = env_int("HUB_MAX_COMMIT_BYTES", 6 * 1024**3)
# A code archive no job has named for this many days (and no job that has not ended names)
# is deleted by beat's `workdirs.expire`, run every WORKDIR_EXPIRE_INTERVAL_S; 0 keeps them.
WORKDIR_RETENTION_DAYS = env_int("WORKDIR_RETENTION_DAYS", 30)
WORKDIR_EXPIRE_INTERVAL_S = env_float("WORKDIR_EXPIRE_INTERVAL_S", 3600.0)
# Hub blobs no commit names (a deleted repository's, an upload never committed) are
# deleted by beat's `hub.collect_garbage` every HUB_GC_INTERVAL_S, once no upload has used
# them for HUB_BLOB_GRACE_S.
HUB_GC_INTERVAL_S = env_float("HUB_GC_INTERVAL_S", 3600.0)
HUB_BLOB_GRACE_S = env_float("HUB_BLOB_GRACE_S", 3600.0)
# The bytes an organization's workdirs, datasets and artifacts may take in all, unless an
# operator set the organization's own `storage_quota_bytes` (apps.accounts.storage); 0: none.
ORG_STORAGE_QUOTA_BYTES = env_int("ORG_STORAGE_QUOTA_BYTES", 100 * 1024**3)
# Any other request body, refused before it is read (config/body_limits.py).
REQUEST_MAX_BYTES = env_int("REQUEST_MAX_BYTES", 4 * 1024 * 1024)


def _default_fernet_key(secret_key: str) -> str:
    """A development-only Fernet key derived from SECRET_KEY, so `make run` needs no setup."""
    return base64.urlsafe_b64encode(hashlib.sha256(secret_key.encode()).digest()).decode()


# Comma-separated Fernet keys, newest first. Encrypt with the first; decrypt with any, so keys
# rotate by prepending a new one and running `manage.py rotate_secrets`.
SECRETS_KEYS = env_list("SECRETS_KEYS", [_default_fernet_key(SECRET_KEY)] if DEBUG else [])
if not SECRETS_KEYS:
    raise ImproperlyConfigured("SECRETS_KEYS must be set when DEBUG is off.")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # The API key class comes first: its Bearer challenge makes DRF answer 401, not 403.
        "apps.accounts.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.accounts.permissions.IsOrgMember"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "apps.core.api_errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["apps.accounts.throttle.ApiKeyRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # The API answers JSON only, and `?format=` is a dataset's format, not a renderer's.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Trainyard API",
    "DESCRIPTION": "Submit, watch and pay for GPU training and fine-tuning jobs.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI is served from our static files, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The dataset formats appear as `format` (datasets) and `dataset_format` (fine-tunes).
    # Serving's `state`, `kind` and `object` share their names with other fields.
    "ENUM_NAME_OVERRIDES": {
        "DatasetFormatEnum": "trainer.formats.FORMATS",
        "KindEnum": "apps.jobs.models.Artifact.Kind",  # the artifacts' (its name before)
        "EndpointStateEnum": "apps.serving.serializers.ENDPOINT_STATES",
        "PromotionKindEnum": "apps.serving.serializers.PROMOTION_KINDS",
        "EndpointObjectEnum": ["endpoint"],
        "ListObjectEnum": ["list"],
        "WebhookFormatEnum": "apps.webhooks.models.Webhook.Format",
        "JobStateEnum": "apps.jobs.states.JobState",
        "SweepStateEnum": "apps.sweeps.models.Sweep.State",
        "TrialStateEnum": "apps.sweeps.models.Trial.State",
    },
}

# Security. Production sets DEBUG=0 and these follow; HTTPS is assumed to terminate at a proxy
# that sets X-Forwarded-Proto.
SECURE = not DEBUG
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if SECURE else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=SECURE)
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

# Throttles (apps.accounts.throttle, whose docstring has the policy): failed sign-ins per
# (username, address) pair, per address and per username (past which each address gets one
# failure for it) in a window, and API requests per key per minute.
SIGN_IN_MAX_FAILURES_PER_PAIR = env_int("SIGN_IN_MAX_FAILURES_PER_PAIR", 5)
SIGN_IN_MAX_FAILURES_PER_USER = env_int("SIGN_IN_MAX_FAILURES_PER_USER", 20)
SIGN_IN_MAX_FAILURES_PER_ADDRESS = env_int("SIGN_IN_MAX_FAILURES_PER_ADDRESS", 20)
SIGN_IN_WINDOW_S = env_float("SIGN_IN_WINDOW_S", 900.0)
API_REQUESTS_PER_MINUTE = env_int("API_REQUESTS_PER_MINUTE", 600)

# An API key's `last_used_at` is written at most this often, so a busy key costs no write
# per request.
API_KEY_TOUCH_INTERVAL_S = env_int("API_KEY_TOUCH_INTERVAL_S", 60)

# Running jobs. Times in seconds unless named otherwise.
# Where the ASGI server listens (the Procfile's `web` reads the same variables).
WEB_HOST = env_str("WEB_HOST", "127.0.0.1")
WEB_PORT = env_int("WEB_PORT", 8000)
# The server's own address on this host (a server bound to every interface is reached on
# loopback): what `seed_demo` and the web healthcheck name.
_WEB_HOST_FOR_URL = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(
    WEB_HOST, f"[{WEB_HOST}]" if ":" in WEB_HOST else WEB_HOST
)
WEB_URL = f"http://{_WEB_HOST_FOR_URL}:{WEB_PORT}"
# The URL runners use to reach this control plane (they may run on other hosts). Unset, it
# is WEB_URL, so a stack moved off 8000 never sends its runners to whatever serves 8000.
TRAINYARD_PUBLIC_URL = env_str("TRAINYARD_PUBLIC_URL", WEB_URL)
# Another Hugging Face compatible hub, given to every workload as HF_ENDPOINT instead of this
# control plane's own hub (/hf, with an HF_TOKEN of the attempt).
TRAINYARD_HF_ENDPOINT = env_str("TRAINYARD_HF_ENDPOINT", "")
# Where the local provider keeps per-attempt work directories.
LOCAL_WORK_DIR = Path(env_str("LOCAL_WORK_DIR", str(VAR_DIR / "work")))
# Where the SSH provider keeps its pinned known_hosts files, private key files (0600, in
# 0700 directories) and shared-connection sockets.
SSH_STATE_DIR = Path(env_str("SSH_STATE_DIR", str(VAR_DIR / "ssh")))
# How the local provider runs an attempt (a provider's config "runtime" overrides it):
# podman or docker run the job's image; host runs the command on this host (single-tenant);
# auto picks podman, else docker, when one answers, else host.
LOCAL_RUNTIME = env_str("LOCAL_RUNTIME", "auto")
# The operator's opt-in to several organizations at once on a host-runtime local provider
# (where workloads can see each other), for providers whose config does not say.
LOCAL_MULTI_TENANT = env_bool("LOCAL_MULTI_TENANT", False)
# The operator's mark that this control plane's host is for development only: there, the
# host runtime may run a workload as the control plane's own user (which can read its
# environment, every tenant's files and the SSH keys). Unmarked, such a launch fails
# `launch_failed`. `make run` sets it (a laptop's stack); a provider's config "dev_only"
# overrides it.
LOCAL_HOST_RUNTIME_DEV_ONLY = env_bool("LOCAL_HOST_RUNTIME_DEV_ONLY", False)
# What a host's container runtime needs beyond its defaults, shell-split: arguments before
# the subcommand (e.g. "--runtime runc --cgroup-manager=cgroupfs") and after `run` (e.g.
# "--ulimit nofile=1024:4096 --ulimit nproc=1000:1000").
CONTAINER_GLOBAL_ARGS = env_str("CONTAINER_GLOBAL_ARGS", "")
CONTAINER_RUN_ARGS = env_str("CONTAINER_RUN_ARGS", "")
# The images fine-tunes and serve jobs run in on a container runtime; empty: this release's
# offline-built `localhost/trainyard-trainer:<version>` and `…/trainyard-engine:<version>`
# (apps.providers.images; `manage.py build_images`). Set them to an operator's registry
# copies of docker/workload.Dockerfile (a CUDA base) for GPU hosts.
TRAINER_IMAGE = env_str("TRAINER_IMAGE", "")
ENGINE_IMAGE = env_str("ENGINE_IMAGE", "")
# How long a launch may wait for an image that is not in the local store to be pulled.
IMAGE_PULL_TIMEOUT_S = env_float("IMAGE_PULL_TIMEOUT_S", 45.0)
RECONCILE_INTERVAL_S = env_float("RECONCILE_INTERVAL_S", 5.0)
# Serving: how often endpoints are synced with their engines as a safety net, and how long
# a Playground server may sit unused before it is stopped.
SERVING_SYNC_INTERVAL_S = env_float("SERVING_SYNC_INTERVAL_S", 30.0)
PLAYGROUND_IDLE_S = env_float("PLAYGROUND_IDLE_S", 900.0)
HEARTBEAT_INTERVAL_S = env_float("HEARTBEAT_INTERVAL_S", 5.0)
# A live attempt whose runner has not been heard from for this long is lost.
HEARTBEAT_TIMEOUT_S = env_float("HEARTBEAT_TIMEOUT_S", 90.0)
TERMINATE_GRACE_S = env_float("TERMINATE_GRACE_S", 10.0)

# Into a running job (docs/ssh.md): the SSH gateway's port (0: no gateway; `make run` and
# the Procfile's `ssh` process use 2222), the address it listens on, and the host name
# people connect to (empty: the host of the page or API call that shows the command). Its
# host key is made once and kept under VAR_DIR. A session idle this long is closed; one
# that carried this many bytes (both ways) is closed too.
SSH_GATEWAY_PORT = env_int("SSH_GATEWAY_PORT", 0)
SSH_GATEWAY_BIND = env_str("SSH_GATEWAY_BIND", "127.0.0.1")
SSH_GATEWAY_HOST = env_str("SSH_GATEWAY_HOST", "")
SSH_GATEWAY_HOST_KEY = Path(
    env_str("SSH_GATEWAY_HOST_KEY", str(VAR_DIR / "ssh_gateway" / "host_ed25519"))
)
SSH_SESSION_IDLE_TIMEOUT_S = env_float("SSH_SESSION_IDLE_TIMEOUT_S", 3600.0)
SSH_SESSION_MAX_BYTES = env_int("SSH_SESSION_MAX_BYTES", 10 * 1024**3)
# How long opening a session waits for the job's runner to take it.
SSH_SESSION_OPEN_TIMEOUT_S = env_float("SSH_SESSION_OPEN_TIMEOUT_S", 30.0)
# A job displaced or reclaimed more often than this fails `too_many_preemptions`.
PREEMPTION_MAX_PER_JOB = env_int("PREEMPTION_MAX_PER_JOB", 10)
# An attempt waiting in a provider's own queue (Slurm) this long is given up and the job
# placed again; a provider's config `queue_timeout_s` overrides it.
PROVIDER_QUEUE_TIMEOUT_S = env_float("PROVIDER_QUEUE_TIMEOUT_S", 6 * 3600.0)
# A job that finds no capacity waits in `requested` this long, then fails `no_capacity`.
NO_CAPACITY_TIMEOUT_S = env_float("NO_CAPACITY_TIMEOUT_S", 3600.0)
# Reconcile re-dispatches waiting jobs when capacity freed, else every DISPATCH_SWEEP_S, at
# most RECONCILE_DISPATCH_BATCH a pass, taking organizations in turn.
DISPATCH_SWEEP_S = env_float("DISPATCH_SWEEP_S", 15.0)
RECONCILE_DISPATCH_BATCH = env_int("RECONCILE_DISPATCH_BATCH", 50)
# At most this many live jobs are billed (and their limits checked) per reconcile pass, the
# most urgent first; a job left over is billed a pass later, every minute still posted.
RECONCILE_BILLING_BATCH = env_int("RECONCILE_BILLING_BATCH", 100)
# At most this many jobs of one organization wait to be placed (`requested`); more is a
# 429 `waiting_jobs_limit`.
MAX_WAITING_JOBS_PER_ORG = env_int("MAX_WAITING_JOBS_PER_ORG", 200)
# An allocation not launched after this long is launched again by reconcile (idempotently).
LAUNCH_STALL_S = env_float("LAUNCH_STALL_S", 15.0)
DISPATCH_MAX_DELIVERIES = env_int("DISPATCH_MAX_DELIVERIES", 5)
LOG_BATCH_MAX_LINES = env_int("LOG_BATCH_MAX_LINES", 5000)  # the most a batch may carry
LOG_BATCH_MAX_INTERVAL_S = env_float("LOG_BATCH_MAX_INTERVAL_S", 0.25)
# Runners gzip a log batch whose body is at least this many bytes (`Content-Encoding: gzip`,
# the spec's `log_gzip_min_bytes`); 0 compresses every batch, a negative value none.
LOG_GZIP_MIN_BYTES = env_int("LOG_GZIP_MIN_BYTES", 32 * 1024)
# Accounted time runs this many times faster than the wall clock: runtime limits and
# per-minute billing use it. 1 in production; tests shorten minutes to seconds with 60.
TRAINYARD_CLOCK_SCALE = env_float("TRAINYARD_CLOCK_SCALE", 1.0)
# Test-only fault injection: dispatch pauses this long right after it commits an allocation,
# so a test can kill the worker at exactly that point. 0 (off) everywhere else.
TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S = env_float("TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S", 0.0)

# Webhooks (apps.webhooks, docs/webhooks.md). A failed delivery is retried after
# WEBHOOK_RETRY_BASE_S, then twice as long each time (capped at WEBHOOK_RETRY_MAX_S), until
# WEBHOOK_RETRY_WINDOW_S after the event. Targets on loopback, private, link-local and other
# non-public addresses are refused unless WEBHOOK_ALLOW_PRIVATE_TARGETS is on.
WEBHOOK_ALLOW_PRIVATE_TARGETS = env_bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", False)
WEBHOOK_TIMEOUT_S = env_float("WEBHOOK_TIMEOUT_S", 10.0)
WEBHOOK_RETRY_BASE_S = env_float("WEBHOOK_RETRY_BASE_S", 30.0)
WEBHOOK_RETRY_MAX_S = env_float("WEBHOOK_RETRY_MAX_S", 3600.0)
WEBHOOK_RETRY_WINDOW_S = env_float("WEBHOOK_RETRY_WINDOW_S", 86400.0)
WEBHOOK_SWEEP_INTERVAL_S = env_float("WEBHOOK_SWEEP_INTERVAL_S", 30.0)

# How often beat recomputes the ledger's cached balances from its transfers and logs any
# difference (apps.billing.tasks.audit_ledger).
LEDGER_AUDIT_INTERVAL_S = env_float("LEDGER_AUDIT_INTERVAL_S", 3600.0)


def _every(task: str, seconds: float) -> dict:
    """A beat entry whose run expires when the next one is due: the runs queued while no
    worker took them are dropped, not replayed back to back when one returns (after a five
    minute outage, sixty reconcile passes, each re-sending every waiting job's dispatch)."""
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


CELERY_BEAT_SCHEDULE = {
    "reconcile": _every("jobs.reconcile", RECONCILE_INTERVAL_S),
    "audit-ledger": _every("billing.audit_ledger", LEDGER_AUDIT_INTERVAL_S),
    # The safety net of endpoint swaps and engine restarts (each also syncs at once).
    "serving-sync": _every("serving.sync_all", SERVING_SYNC_INTERVAL_S),
    "playground-idle": _every("playground.stop_idle", SERVING_SYNC_INTERVAL_S),
    "workdirs-expire": _every("workdirs.expire", WORKDIR_EXPIRE_INTERVAL_S),
    "hub-gc": _every("hub.collect_garbage", HUB_GC_INTERVAL_S),
    # Webhook deliveries whose retry is due (short waits are also queued with a countdown).
    "webhooks-sweep": _every("webhooks.sweep", WEBHOOK_SWEEP_INTERVAL_S),
    # The safety net of sweeps (a lost outcome) and what stops one at its cost cap.
    "sweeps-reconcile": _every("sweeps.reconcile", RECONCILE_INTERVAL_S),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
