"""`manage.py build_images [--runtime podman|docker] [--if-missing]`: build the workload
image (`trainyard-trainer` and `trainyard-engine`, this release's tag) offline into the
local container runtime's store (apps.providers.images), printing its progress. `make run`
runs it with `--if-missing` (build only when missing or stale; nothing when jobs run on the
host), so a fine-tune never waits on an image that nothing built."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from apps.providers import images
from apps.providers.backends.local import container_runtime, runtime_of


class Command(BaseCommand):
    help = "Build the trainer and engine image offline into the local container runtime."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--runtime",
            choices=["podman", "docker"],
            help="Default: the local provider's (LOCAL_RUNTIME; auto picks podman, else docker).",
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="Build only when the image is missing or stale; do nothing when jobs run on "
            "the host.",
        )

    def handle(self, *args, runtime: str | None, if_missing: bool, **options) -> None:
        binary = runtime or runtime_of({})
        if binary not in ("podman", "docker"):
            if if_missing:
                return
            raise CommandError(
                f"Jobs run on the host here (LOCAL_RUNTIME resolves to {binary!r}): there is "
                "no container runtime to build into. Name one with --runtime."
            )
        store = container_runtime(binary)
        trainer, engine = images.builder_images()
        self._build(store, binary, trainer, engine, force=not if_missing)

    def _build(self, store, binary: str, trainer: str, engine: str, *, force: bool) -> None:
        started = time.monotonic()
        said = []

        def say(line: str) -> None:
            if not said:
                self.stdout.write(
                    f"Building {trainer} (also {engine}), the image fine-tunes and serve "
                    f"jobs run in on {binary}: minutes the first time, seconds after a "
                    "change to the workload code."
                )
            said.append(line)
            self._say(line)

        try:
            images.ensure_workload_image(store, say=say, force=force)
        except images.ImageBuildError as exc:
            raise CommandError(
                f"{exc} Without the image, fine-tunes and serve jobs in containers fail "
                "image_pull_failed; LOCAL_RUNTIME=host runs them as processes instead "
                "(development only)."
            ) from exc
        if said:
            self.stdout.write(f"Built {trainer} in {time.monotonic() - started:.0f} s.")

    def _say(self, line: str) -> None:
        self.stdout.write(f"  {line}")
        self.stdout.flush()
