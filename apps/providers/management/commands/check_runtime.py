"""`manage.py check_runtime [--exec COMMAND ...]`: check that the local container runtime
starts containers before a stack serves (`make run` and compose's worker run it first).

When LOCAL_RUNTIME resolves to podman or docker, a tiny container run
(`runtime_probe.find_flags`). The flags given (CONTAINER_GLOBAL_ARGS, CONTAINER_RUN_ARGS)
work: one line names the runtime. They fail but a known set works: that set is put in the
environment of COMMAND (the stack's processes), and one paragraph says so and how to keep it.
None works: one paragraph naming the fix, exit 1, and COMMAND never runs — a stack whose
container jobs would all fail is never started. The host runtime needs no check; one line
says jobs run as this host's processes, image unused.

A provider's own config `global_args`/`run_args` is not checked here (it overrides these).
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.providers.backends.local import runtime_of
from apps.providers.backends.runtime_probe import KNOWN_FLAG_SETS, find_flags


class Command(BaseCommand):
    help = "Check that the local container runtime starts containers; then exec COMMAND."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--exec",
            dest="command",
            nargs="...",
            default=[],
            help="What to run once the check passes, with the flags it found.",
        )

    def handle(self, *args, command: list[str], **options) -> None:
        runtime = runtime_of({})
        if runtime in ("podman", "docker"):
            self._check(runtime)
        else:
            self.stdout.write(
                "Jobs run as processes of this host (LOCAL_RUNTIME="
                f"{settings.LOCAL_RUNTIME}): no container, so a job's image is not used and "
                "its workload can reach what this host's user can. For containers, install "
                "podman (or docker) or set LOCAL_RUNTIME=podman."
            )
        if command:
            self.stdout.flush()
            os.execvp(command[0], command)

    def _check(self, binary: str) -> None:
        given_global, given_run = settings.CONTAINER_GLOBAL_ARGS, settings.CONTAINER_RUN_ARGS
        result = find_flags(binary, given_global, given_run)
        if not result.ok:
            known_global, known_run = KNOWN_FLAG_SETS[0]
            raise CommandError(
                f"{binary} cannot start a container on this host, so no container job "
                f"could run: nothing was started. It said: {result.detail.rstrip('.')}. "
                "No flags known to fix hosts like this one helped. Fix the runtime, give it "
                f'the flags this host needs (e.g. CONTAINER_GLOBAL_ARGS="{known_global}" '
                f'CONTAINER_RUN_ARGS="{known_run}"), or run jobs as processes of this host '
                "with LOCAL_RUNTIME=host (development only: workloads then run as your user)."
            )
        if not result.changed(given_global, given_run):
            self.stdout.write(f"{binary} starts containers: container jobs will run.")
            return
        os.environ["CONTAINER_GLOBAL_ARGS"] = result.global_args
        os.environ["CONTAINER_RUN_ARGS"] = result.run_args
        self.stdout.write(
            f"{binary} could not start a container with the flags it was given "
            f"({result.detail}). It can with "
            f'CONTAINER_GLOBAL_ARGS="{result.global_args}" '
            f'CONTAINER_RUN_ARGS="{result.run_args}", so this stack uses them; set them in '
            "your environment to make it so from the start."
        )
