"""Reads of projects that more than one app relies on."""

from __future__ import annotations

from apps.accounts.models import Organization
from apps.projects.models import Project

# The slug of the project made for an organization's first job without a project.
DEFAULT_PROJECT_SLUG = "default"


def default_project(organization: Organization) -> Project | None:
    """Where a job submitted without a project goes (the API, the CLI without `--project`, a
    job file without `project:`): the organization's project marked `is_default` (for the
    demo organization the seeded *Getting started*, so a newcomer's CLI jobs show there
    beside the ones from the page), else its `default` project (made by an earlier such
    job). None when it has neither: the caller then creates *Default*, marked default."""
    projects = Project.objects.for_org(organization)
    marked = projects.filter(is_default=True).first()
    return marked or projects.filter(slug=DEFAULT_PROJECT_SLUG).first()
