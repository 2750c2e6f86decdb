"""Managed fine-tunes: a job of kind `finetune` that runs the built-in LoRA trainer
(`python -m trainer`, the `train` extra) with a config built from the form or the API.

The job is an ordinary job underneath — its container runs a short script that checks the
trainer is installed (a clear message and exit 2 if not) and starts it with the config as
JSON in $FINETUNE_CONFIG — so dispatch, logs, limits and billing work as for any job.
The trainer's exit code 3 means it graded itself and failed (`grading_failed`).

The config's `dataset` is a hub id, a path on the workload's host, or an uploaded dataset's
id (`ds_…`, one of the job's project's): the runner downloads that one into the workload's
directory and the trainer gets its path there (`apps.finetunes.inputs`).
"""

from __future__ import annotations

import base64
import json

from rest_framework import serializers

from apps.core.api import validated
from apps.core.errors import InvalidRequest
from apps.core.serializers import StrictSerializer
from apps.finetunes.datasets import check_dataset
from apps.finetunes.hub_refs import check_hub_references
from apps.jobs.specs import (
    DEFAULT_DISK_GB,
    JobFileIn,
    SecretRefIn,
    env_name_problem,
    request_from_spec,
)
from apps.projects.models import Project
from apps.providers import images
from apps.secrets.selectors import SECRET_ENV_PARAM, validate_secret_env
from trainer.formats import FORMATS

# Not TRAINYARD_…: that prefix is the platform's own (see apps.jobs.specs).
CONFIG_ENV = "FINETUNE_CONFIG"
TRAINER_MISSING = (
    "The fine-tune trainer is not installed on this host: install it with pip install -e '.[train]'"
)
SCRIPT = f"""\
#!/usr/bin/env bash
# A managed fine-tune; its config is the JSON in ${CONFIG_ENV}.
set -euo pipefail
if ! python -c 'import trainer' >/dev/null 2>&1; then
  echo "{TRAINER_MISSING}" >&2
  exit 2
fi
exec python -m trainer --config-json "${CONFIG_ENV}"
"""
CONFIG_FIELDS = ("model", "dataset", "dataset_format", "max_samples", "max_steps", "learning_rate")
# The adapter's shape: in the config only when the request gives them (else the trainer's
# defaults, `trainer.config.TrainConfig`: rank 16, alpha 32, dropout 0.05).
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout")


class FinetuneConfigIn(StrictSerializer):
    """The trainer config a fine-tune request may set. Strict, like the jobs API: an unknown
    field (`max_step`, `grading_threshold`) is a 400 naming it, never silently dropped. The
    trainer's self-grading has no setting to expose: it fails an adapter whose loss became NaN
    or whose held-out loss got worse (`trainer.train.grade`)."""

    model = serializers.CharField(max_length=500)
    dataset = serializers.CharField(
        max_length=500,
        help_text="A hub dataset id, a path on the workload's host, or the id (`ds_…`) of a "
        "dataset uploaded to the project.",
    )
    dataset_format = serializers.ChoiceField(
        choices=list(FORMATS),
        required=False,
        help_text="Required, except for an uploaded dataset: that one is trained as the "
        "format it was checked as on upload (a different one is refused).",
    )
    max_samples = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None
    )
    max_steps = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None)
    learning_rate = serializers.FloatField(min_value=1e-9, max_value=1.0, default=2e-4)
    seed = serializers.IntegerField(required=False, default=42)
    save_steps = serializers.IntegerField(min_value=1, required=False, default=10)
    lora_r = serializers.IntegerField(
        min_value=1, max_value=1024, required=False, help_text="The LoRA rank (default 16)."
    )
    lora_alpha = serializers.FloatField(
        min_value=1e-6, max_value=4096, required=False, help_text="The LoRA alpha (default 32)."
    )
    lora_dropout = serializers.FloatField(
        min_value=0, max_value=0.99, required=False, help_text="The LoRA dropout (default 0.05)."
    )
    merge = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also merge the final adapter into the base model and publish those weights "
        "(`merged/` in the adapter's hub repository).",
    )


class FinetuneCreateIn(FinetuneConfigIn):
    """`POST /api/v1/projects/{id}/finetunes`: the trainer's config plus job basics."""

    name = serializers.CharField(max_length=200)
    compute = serializers.DictField(required=False)
    limits = serializers.DictField(required=False)
    priority_class = serializers.ChoiceField(
        choices=["standard", "preemptible"], required=False, default="standard"
    )
    job_file = JobFileIn(required=False, allow_null=True)
    secret_env = serializers.DictField(
        child=SecretRefIn(),
        required=False,
        default=dict,
        help_text="Variables the trainer gets from the organization's secrets, as a container "
        "job's `secret_env`: e.g. `WANDB_API_KEY` or `MLFLOW_TRACKING_URI` (with its "
        "credentials) to report the run to W&B or MLflow.",
    )

    def validate_secret_env(self, value: dict) -> dict:
        errors = {name: problem for name in value if (problem := _secret_env_problem(name))}
        if errors:
            raise serializers.ValidationError(errors)
        return value


def _secret_env_problem(name: str) -> str | None:
    if name == CONFIG_ENV:
        return f"{CONFIG_ENV} carries the trainer's config and cannot come from a secret."
    return env_name_problem(name)


DEFAULT_COMPUTE = {
    "accelerator": "cpu",
    "gpu_count": 1,
    "ephemeral_disk_gb": DEFAULT_DISK_GB["finetune"],
}


def job_payload(
    *,
    name: str,
    project_id: str,
    config: dict,
    compute: dict | None = None,
    limits: dict | None = None,
    priority_class: str = "standard",
    secret_env: dict | None = None,
    job_file: dict | None = None,
) -> dict:
    """The job request (as `POST /jobs` takes it) that runs the trainer with `config`, and
    `secret_env` (references, resolved when the runner fetches its spec) in its environment;
    `job_file` is the file it was described in, kept with the job."""
    payload = {
        "name": name,
        "project": project_id,
        "priority_class": priority_class,
        "compute": compute or dict(DEFAULT_COMPUTE),
        "container": {
            "image": images.trainer_image(),
            "script_b64": base64.b64encode(SCRIPT.encode()).decode(),
            "env": {CONFIG_ENV: json.dumps(config, sort_keys=True)},
        },
    }
    if secret_env:
        payload["container"]["secret_env"] = secret_env
    if limits:
        payload["limits"] = limits
    if job_file:
        payload["job_file"] = job_file
    return payload


def payload_from_api(body: object, *, project: Project) -> dict:
    """Validate an API fine-tune request into a job request; InvalidRequest names the field.
    An uploaded dataset (`ds_…`) must be one of `project`'s."""
    data = validated(FinetuneCreateIn, body)
    data["dataset"] = data["dataset"].strip()
    check_hub_references(project=project, model=data["model"], dataset=data["dataset"])
    data["dataset_format"] = check_dataset(
        project=project, dataset=data["dataset"], dataset_format=data.get("dataset_format")
    )
    if not data["dataset_format"]:
        raise InvalidRequest("This field is required.", param="dataset_format")
    _check_secret_refs(project, data["secret_env"])
    config = {field: data[field] for field in (*CONFIG_FIELDS, "seed", "save_steps")}
    config.update({field: data[field] for field in LORA_FIELDS if field in data})
    if data["merge"]:
        config["merge"] = True
    return job_payload(
        name=data["name"],
        project_id=project.public_id,
        config=config,
        compute=data.get("compute"),
        limits=data.get("limits"),
        priority_class=data["priority_class"],
        secret_env=data["secret_env"],
        job_file=data.get("job_file"),
    )


def request_of(job) -> dict:
    """The `POST /projects/{id}/finetunes` body that would make this fine-tune again: its
    trainer config and job basics (a re-run merges its overrides into it)."""
    container_request = request_from_spec(job.spec, project_id=job.project.public_id)
    config = config_of(job) or {}
    body = {
        field: config[field]
        for field in (*CONFIG_FIELDS, "seed", "save_steps", *LORA_FIELDS)
        if field in config
    }
    if config.get("merge"):
        body["merge"] = True
    body.update(
        name=job.spec["name"],
        priority_class=job.spec["priority_class"],
        compute=container_request["compute"],
    )
    if "limits" in container_request:
        body["limits"] = container_request["limits"]
    if container_request["container"].get("secret_env"):
        body["secret_env"] = container_request["container"]["secret_env"]
    return body


def _check_secret_refs(project: Project, secret_env: dict) -> None:
    """Every reference names a key of a secret of the project's organization; the error
    names the field as this request spells it (`secret_env.NAME`)."""
    try:
        validate_secret_env(organization=project.organization, secret_env=secret_env)
    except InvalidRequest as error:
        param = (error.param or "").replace(SECRET_ENV_PARAM, "secret_env", 1)
        raise InvalidRequest(str(error.detail), param=param) from None


def config_of(job) -> dict | None:
    """The trainer config a fine-tune job was created with."""
    raw = job.spec.get("container", {}).get("env", {}).get(CONFIG_ENV)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
