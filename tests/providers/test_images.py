"""The image Trainyard's own workloads run in (apps.providers.images): what goes in, how a
stale one is told from a current one, and the image itself, built offline the way
`manage.py build_images` and `make run` build it."""

from __future__ import annotations

import shutil
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.providers import images
from apps.providers.backends.local import container_runtime
from tests.live import ROOT


def test_the_image_holds_the_train_extra_and_what_it_needs_and_no_more():
    names = {
        dist.metadata["Name"].lower().replace("_", "-") for dist in images.workload_distributions()
    }
    assert {"torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers"} <= names
    assert {"huggingface-hub", "numpy", "jinja2"} <= names  # needed by those, in turn
    assert not {"django", "celery", "psycopg", "pytest"} & names  # the control plane's own


def test_the_names_follow_the_release_unless_the_operator_names_images(settings):
    assert images.builder_images() == (
        "localhost/trainyard-trainer:0.1.0",
        "localhost/trainyard-engine:0.1.0",
    )
    assert images.trainer_image() == "localhost/trainyard-trainer:0.1.0"
    settings.TRAINER_IMAGE = "registry.example.com/trainyard-workload:0.1.0"
    assert images.trainer_image() == "registry.example.com/trainyard-workload:0.1.0"
    assert images.engine_image() == "localhost/trainyard-engine:0.1.0"


def test_the_digest_follows_the_workload_code(settings, tmp_path):
    for package in images.PROJECT_PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package)
    settings.BASE_DIR = tmp_path
    distributions = images.workload_distributions()
    before = images.source_digest(distributions)
    assert images.source_digest(distributions) == before
    config = tmp_path / "trainer" / "config.py"
    config.write_text(config.read_text() + "\n# changed\n")
    assert images.source_digest(distributions) != before


def test_build_images_if_missing_does_nothing_where_jobs_run_on_the_host(settings):
    settings.LOCAL_RUNTIME = "host"
    out = StringIO()
    call_command("build_images", "--if-missing", stdout=out)
    assert out.getvalue() == ""
    with pytest.raises(CommandError, match="Jobs run on the host here"):
        call_command("build_images", stdout=out)


@pytest.mark.live
def test_the_built_image_runs_the_trainer_and_the_engine_and_is_current(trainer_image):
    podman = container_runtime("podman")  # with this machine's flags (test settings)
    # -B: nothing written while it runs, so each module's bytecode is the image's own.
    code = (
        "import os, torch, transformers, peft, huggingface_hub, trainer.train, engine.model;"
        "import runner; from importlib.util import cache_from_source as pyc;"
        "modules = (torch, transformers, peft, trainer.train, engine.model, runner);"
        "print('no bytecode:',"
        " [m.__name__ for m in modules if not os.path.exists(pyc(m.__file__))]);"
        "print('ok', torch.__version__, open('/etc/trainyard-image').read().strip())"
    )
    run = ("run", "--rm", "--network=none", *podman.run_args, trainer_image)
    ran = podman.cli(*run, "python3", "-B", "-c", code)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("no bytecode: []\nok 2.13.0")
    assert "trainyard workload image 0.1.0" in ran.stdout
    assert images.image_is_current(podman, trainer_image)
    assert images.image_is_current(podman, images.engine_image())
