"""Budget writes: create, change and delete an organization's budgets.

A project's budget sits inside its organization's: its limit may not exceed any
organization budget of the same period, and an organization budget may not be lowered below
a project budget of that period. Every write locks the organization's row first, so two
admins editing at once cannot each pass the check against the other's old value. Each write
pushes to the organization's open Billing pages after commit, so their bars follow.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.accounts.models import Organization, User
from apps.billing import live
from apps.billing.budgets import DEFAULT_THRESHOLDS
from apps.billing.models import Budget
from apps.core.errors import InvalidRequest, NotFound
from apps.core.ids import new_public_id
from apps.core.money import format_usd
from apps.core.transactions import after_commit
from apps.projects.models import Project

EDITABLE = ("name", "project", "period", "limit_micros", "action", "thresholds")


def project_of(organization: Organization, project_id: str | None) -> Project | None:
    """The organization's project by public id (None for the whole organization); another
    organization's project is not found, like one that does not exist."""
    if project_id is None:
        return None
    project = Project.objects.filter(organization=organization, public_id=project_id).first()
    if project is None:
        raise NotFound(f"No project {project_id!r} in this organization.", param="project")
    return project


def budget_create(
    *, organization: Organization, created_by: User | None = None, **fields: Any
) -> Budget:
    """A new budget; `fields` are those of EDITABLE (thresholds default to 50/80/100 %)."""
    fields.setdefault("thresholds", list(DEFAULT_THRESHOLDS))
    with transaction.atomic():
        Organization.objects.select_for_update(no_key=True).filter(pk=organization.pk).first()
        budget = Budget(
            public_id=new_public_id("bud"),
            organization=organization,
            created_by=created_by,
            **fields,
        )
        check_nesting(budget)
        budget.save()
        after_commit(live.balance_changed, organization.pk)
    return budget


def budget_update(*, budget: Budget, **fields: Any) -> Budget:
    """Change some of a budget's EDITABLE fields."""
    with transaction.atomic():
        Organization.objects.select_for_update(no_key=True).filter(
            pk=budget.organization_id
        ).first()
        budget = Budget.objects.select_related("project").get(pk=budget.pk)
        for name, value in fields.items():
            setattr(budget, name, value)
        check_nesting(budget)
        budget.save()
        after_commit(live.balance_changed, budget.organization_id)
    return budget


def budget_delete(*, budget: Budget) -> None:
    with transaction.atomic():
        budget.delete()
        after_commit(live.balance_changed, budget.organization_id)


def check_nesting(budget: Budget) -> None:
    """Refuse (400 on `limit_usd`) a budget that breaks the nesting of project budgets in
    the organization's budget of the same period."""
    same_period = Budget.objects.filter(
        organization_id=budget.organization_id, period=budget.period
    ).exclude(pk=budget.pk)
    if budget.project_id is not None:
        ceiling = same_period.filter(project__isnull=True).order_by("limit_micros").first()
        if ceiling is not None and budget.limit_micros > ceiling.limit_micros:
            raise InvalidRequest(
                f"A project's {budget.period} budget cannot exceed the organization's: "
                f"{format_usd(budget.limit_micros)} is more than "
                f"{format_usd(ceiling.limit_micros)}.",
                param="limit_usd",
            )
        return
    floor = (
        same_period.filter(project__isnull=False)
        .select_related("project")
        .order_by("-limit_micros")
        .first()
    )
    if floor is not None and budget.limit_micros < floor.limit_micros:
        raise InvalidRequest(
            f"The organization's {budget.period} budget cannot be less than a project's: "
            f"{format_usd(budget.limit_micros)} is less than {format_usd(floor.limit_micros)} "
            f"(project {floor.project.name!r}).",
            param="limit_usd",
        )
