#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

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

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
