"""The ASGI entry point as a server process loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_loading_the_app_freezes_what_was_loaded_out_of_the_garbage_collectors_reach():
    # In a process of its own: freezing here would pin the test run's objects forever.
    probe = (
        "import gc, sys\n"
        "import config.asgi\n"
        "assert 'apps.jobs.runner_api.logs' in sys.modules  # the views are loaded too\n"
        "print(gc.get_freeze_count())\n"
    )
    env = {**os.environ, "DATABASE_POOL": "0", "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 50_000
