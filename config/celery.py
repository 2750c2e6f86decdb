"""The Celery app. Configuration lives in Django settings under the CELERY_ namespace.

Database connections in worker processes: Celery's Django fixup closes every connection
before and after each task and, when the connection comes from a pool in a prefork child,
closes the whole pool too (`close_pool`), so every task paid for a new pool, its threads and
a new PostgreSQL session (about 6 ms of the worker's time, and a backend process started and
ended by PostgreSQL, per task; a thousand dispatches paid it a thousand times).
`CELERY_DB_REUSE_MAX` (settings) turns that closing off, and `return_connections` below
does what a request's end does in the web process instead: a connection that broke or was
left mid-transaction is dropped, a good one goes back to the process's pool for the next
task. A forked child still drops what it inherited from its parent (the fixup's
`worker_process_init`, which `CELERY_DB_REUSE_MAX` does not change).
"""

import gc
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("trainyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# PostgreSQL's pg_stat_activity names a worker process's sessions by this.
WORKER_APPLICATION_NAME = "trainyard worker"


@signals.celeryd_init.connect
def pause_collector_for_startup(**kwargs) -> None:
    """A worker sets Django up and imports every task module after this: the collector stays
    off until `freeze_startup_heap` (a sixth of that startup's CPU, as for manage.py)."""
    gc.disable()


@signals.worker_init.connect
@signals.beat_init.connect
def freeze_startup_heap(**kwargs) -> None:
    """What is loaded by now (Django, the apps, their task modules) lives as long as the
    process: frozen out of the garbage collector's reach, as config/asgi.py does for the web
    process, so each full collection walks only what the tasks make. The pool's children are
    forked after this and keep it (and share those pages with the parent undisturbed)."""
    gc.collect()
    gc.freeze()
    gc.enable()


@signals.worker_process_init.connect
def name_connections(**kwargs) -> None:
    """Before the child opens its first connection: its sessions say whose they are."""
    from django.conf import settings
    from django.db import connections

    for alias in connections:
        settings_dict = connections[alias].settings_dict
        if settings_dict["ENGINE"] in settings.POSTGRESQL_ENGINES:
            settings_dict.setdefault("OPTIONS", {})["application_name"] = WORKER_APPLICATION_NAME


@signals.task_prerun.connect
@signals.task_postrun.connect
def return_connections(**kwargs) -> None:
    """Before and after each task, as Django does around a request: drop a connection that
    failed or is past CONN_MAX_AGE (with a pool, 0: it goes back to the pool)."""
    task = kwargs.get("task")
    if task is not None and getattr(task.request, "is_eager", False):
        return  # an eager task runs inside its caller's connection and transaction
    from django.db import close_old_connections

    close_old_connections()
