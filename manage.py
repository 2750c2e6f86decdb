#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import gc
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # On a laptop with nothing configured, manage.py is a development tool (as `make run`
    # uses it). Anywhere SECRET_KEY is set, DEBUG stays off unless asked for; the web
    # server, worker and beat never get this default.
    if "DEBUG" not in os.environ and "SECRET_KEY" not in os.environ:
        os.environ["DEBUG"] = "1"
    from django.core.management import execute_from_command_line

    _set_up_django()
    execute_from_command_line(sys.argv)


def _set_up_django() -> None:
    """Django's setup, done here with the cyclic garbage collector off, then what it loaded
    (every app, model and migration module) frozen out of the collector's reach before the
    command runs: the collector would otherwise walk those objects again and again (a
    `migrate` of a new database: 3.6 → 3.0 CPU-seconds). Settings that cannot be loaded,
    and `runserver` (whose autoreloader sets Django up itself), are left to Django."""
    import django
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    if sys.argv[1:2] == ["runserver"]:
        return
    gc.disable()
    try:
        try:
            settings.INSTALLED_APPS  # noqa: B018 (loads the settings)
        except (ImproperlyConfigured, ImportError):
            return  # the command line reports it as Django does
        django.setup()
    finally:
        gc.freeze()
        gc.enable()


if __name__ == "__main__":
    main()
