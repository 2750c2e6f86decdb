"""Which uploaded datasets a fine-tune may name, and the format to train one as."""

from __future__ import annotations

import re

from django.db.models import QuerySet, Sum

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.finetunes.models import Dataset
from apps.projects.models import Project

DATASET_ID_RE = re.compile(r"ds_[A-Za-z0-9]{1,40}")


def is_dataset_id(value: object) -> bool:
    """True when `value` names an uploaded dataset (`ds_…`) rather than a hub id or path."""
    return isinstance(value, str) and DATASET_ID_RE.fullmatch(value.strip()) is not None


def project_datasets(project: Project) -> QuerySet[Dataset]:
    """The datasets a fine-tune of `project` may use, newest first."""
    return Dataset.objects.filter(project=project).order_by("-created_at", "-id")


def check_dataset(*, project: Project, dataset: str, dataset_format: str | None) -> str | None:
    """The format to train `dataset` as.

    For an uploaded dataset (`ds_…`) of `project` that is the format it was checked as on
    upload; `dataset_format`, when given, must be the same. Raises InvalidRequest with
    `param` "dataset" for an id that is not one of the project's datasets (another
    project's or organization's is just as unknown) and "dataset_format" on a mismatch. For a
    hub id or a path `dataset_format` comes back as it is."""
    if not is_dataset_id(dataset):
        return dataset_format
    found = project_datasets(project).filter(public_id=dataset.strip()).first()
    if found is None:
        raise InvalidRequest(
            f"No uploaded dataset {dataset.strip()} in project {project.name}.", param="dataset"
        )
    if dataset_format and dataset_format != found.dataset_format:
        label = found.get_dataset_format_display()
        raise InvalidRequest(
            f"{found.public_id} ({found.name}) was checked as {label} when it was uploaded; "
            f"train it as {label}.",
            param="dataset_format",
        )
    return found.dataset_format


def bytes_stored(organization: Organization) -> int:
    """Bytes of the organization's uploaded datasets (its storage quota counts them)."""
    total = Dataset.objects.filter(project__organization=organization).aggregate(
        total=Sum("size_bytes")
    )["total"]
    return total or 0
