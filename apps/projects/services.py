from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils.text import slugify

from apps.accounts.models import Organization, User
from apps.projects.models import Project


class ProjectSlugTaken(Exception):
    """Another project of the same organization already uses this slug."""


def project_create(
    *,
    organization: Organization,
    name: str,
    slug: str = "",
    description: str = "",
    created_by: User | None = None,
) -> Project:
    """Create a project; the slug defaults to the slugified name.

    Raises ProjectSlugTaken when the organization already has that slug (checked by the
    database constraint, so two simultaneous creates cannot both win)."""
    slug = slug or slugify(name)[:64] or "project"
    try:
        with transaction.atomic():
            return Project.objects.create(
                organization=organization,
                name=name,
                slug=slug,
                description=description,
                created_by=created_by,
            )
    except IntegrityError as exc:
        raise ProjectSlugTaken(slug) from exc
