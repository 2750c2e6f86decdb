from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.core.ids import new_public_id


def new_project_id() -> str:
    return new_public_id("proj")


class ProjectQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> ProjectQuerySet:
        return self.filter(organization=organization)


class Project(models.Model):
    """A folder for jobs inside an organization. Its slug is unique within the org and
    names it in page URLs; its `public_id` names it in the API."""

    public_id = models.CharField(max_length=32, unique=True, default=new_project_id, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="projects"
    )
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Where a job submitted without a project lands (`apps.projects.selectors.default_project`);
    # at most one per organization. `seed_demo` marks *Getting started*.
    is_default = models.BooleanField(default=False)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="project_slug_per_org"),
            models.UniqueConstraint(
                fields=["organization"],
                condition=models.Q(is_default=True),
                name="one_default_project_per_org",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.slug}"


# Referenced by migrations 0002 and 0003, which created the Dataset model here before it
# moved to apps.finetunes; kept until those migrations are squashed.
def new_dataset_id() -> str:
    return new_public_id("ds")


def dataset_upload_to(instance, filename: str) -> str:
    return f"datasets/{instance.project.public_id}/{filename}"
