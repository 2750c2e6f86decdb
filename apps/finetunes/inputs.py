"""Files a workload needs that the control plane stores: a fine-tune's uploaded dataset.

A fine-tune names one of its project's uploaded datasets by public id (`"dataset": "ds_…"`,
from the form or the API), and its stored config keeps that id. Uploaded files live in the
default storage, which may be an S3 bucket the workload's host cannot see, so the file is
never handed over as a path. Instead, when the runner fetches its spec (`runner_inputs`):

- `inputs` lists the file: where to put it, relative to the workload's working directory
  (`inputs/<id><.jsonl|.csv>`), its download URL on the runner API (the attempt's token
  only fetches the dataset its own job names), SHA-256 and size;
- the config handed to the trainer (`$FINETUNE_CONFIG`) names that relative path.

The runner downloads every input before the workload starts (`runner/inputs.py`). Hub ids and
paths on the host are passed through untouched, as before.
"""

from __future__ import annotations

import json
from typing import TypedDict

from django.urls import reverse

from apps.finetunes import payloads
from apps.finetunes.datasets import is_dataset_id
from apps.finetunes.models import Dataset
from apps.jobs.models import Job

INPUTS_DIR = "inputs"


def input_path(dataset_id: str, suffix: str = ".jsonl") -> str:
    return f"{INPUTS_DIR}/{dataset_id}{suffix}"


def referenced_dataset_id(job: Job) -> str | None:
    """The uploaded dataset a fine-tune job names, or None."""
    if job.kind != Job.Kind.FINETUNE:
        return None
    config = payloads.config_of(job) or {}
    dataset = config.get("dataset")
    return dataset.strip() if is_dataset_id(dataset) else None


def referenced_dataset(job: Job) -> Dataset | None:
    """The uploaded dataset a fine-tune job names, if it still exists in the job's project."""
    dataset_id = referenced_dataset_id(job)
    if dataset_id is None:
        return None
    return Dataset.objects.filter(project_id=job.project_id, public_id=dataset_id).first()


class RunnerInput(TypedDict):
    path: str
    download_url: str
    sha256: str
    size_bytes: int


def runner_inputs(job: Job) -> tuple[list[RunnerInput], dict[str, str]]:
    """The spec's `inputs` and the env entries that replace the job's own for the runner.

    A dataset deleted since the job was created is not offered; the trainer is still pointed
    at where it would have been, and fails naming that file."""
    dataset_id = referenced_dataset_id(job)
    if dataset_id is None:
        return [], {}
    dataset = referenced_dataset(job)
    inputs: list[RunnerInput] = []
    if dataset is None:
        path = input_path(dataset_id)
    else:
        path = input_path(dataset.public_id, dataset.suffix)
        inputs.append(
            {
                "path": path,
                "download_url": reverse(
                    "runner-dataset-download",
                    kwargs={"job_id": job.public_id, "dataset_id": dataset.public_id},
                ),
                "sha256": dataset.sha256,
                "size_bytes": dataset.size_bytes,
            }
        )
    config = {**(payloads.config_of(job) or {}), "dataset": path}
    return inputs, {payloads.CONFIG_ENV: json.dumps(config, sort_keys=True)}
