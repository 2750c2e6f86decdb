"""The budget form of the Billing page: the same fields as the API's `BudgetIn`, in dollars,
with thresholds typed as "50, 80, 100". The nesting rules (a project's budget inside its
organization's) are the service's, and come back as an error on the limit."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from apps.accounts.models import Organization
from apps.billing.budgets import DEFAULT_THRESHOLDS
from apps.billing.models import Budget
from apps.core.money import MICROS_PER_USD
from apps.projects.models import Project

WHOLE_ORGANIZATION = ""


class BudgetForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Optional, e.g. 'research'.")
    project = forms.ChoiceField(label="Scope", required=False)
    period = forms.ChoiceField(choices=Budget.Period.choices, initial=Budget.Period.MONTH)
    limit_usd = forms.DecimalField(
        label="Limit (USD)",
        max_digits=15,
        decimal_places=6,
        widget=forms.NumberInput(attrs={"step": "0.01", "min": "0.01", "inputmode": "decimal"}),
    )
    action = forms.ChoiceField(
        choices=Budget.Action.choices,
        initial=Budget.Action.ALERT,
        help_text="alert: notify only; block: refuse new jobs once spent; terminate: block "
        "and also end running jobs in scope.",
    )
    thresholds = forms.CharField(
        max_length=400,
        initial=", ".join(str(t) for t in DEFAULT_THRESHOLDS),
        help_text="Percents of the limit that send a notice, 1 to 100, comma-separated.",
    )

    def __init__(self, *args, organization: Organization, **kwargs) -> None:
        kwargs.setdefault("auto_id", "id_budget_%s")
        super().__init__(*args, **kwargs)
        projects = Project.objects.filter(organization=organization).order_by("name")
        self.fields["project"].choices = [(WHOLE_ORGANIZATION, "Whole organization")] + [
            (project.public_id, f"Project {project.name}") for project in projects
        ]

    @classmethod
    def editing(cls, budget: Budget, *args, **kwargs) -> BudgetForm:
        """The form for changing `budget`, filled with what it holds now."""
        initial = {
            "name": budget.name,
            "project": budget.project.public_id if budget.project_id else WHOLE_ORGANIZATION,
            "period": budget.period,
            # "50", not normalize()'s "5E+1"
            "limit_usd": format((Decimal(budget.limit_micros) / MICROS_PER_USD).normalize(), "f"),
            "action": budget.action,
            "thresholds": ", ".join(str(t) for t in budget.thresholds or DEFAULT_THRESHOLDS),
        }
        return cls(*args, organization=budget.organization, initial=initial, **kwargs)

    def clean_limit_usd(self) -> Decimal:
        value = self.cleaned_data["limit_usd"]
        if value <= 0:
            raise forms.ValidationError("The limit must be more than $0.")
        return value

    def clean_thresholds(self) -> list[int]:
        """Whole percents from 1 to 100, sorted, each once (as the API stores them)."""
        parts = [part.strip().rstrip("%") for part in self.cleaned_data["thresholds"].split(",")]
        parts = [part for part in parts if part]
        if not parts:
            raise forms.ValidationError("Give at least one threshold, e.g. 50, 80, 100.")
        try:
            values = {int(part) for part in parts}
        except ValueError as exc:
            raise forms.ValidationError("Thresholds are whole percents, e.g. 50, 80, 100.") from exc
        if any(value < 1 or value > 100 for value in values):
            raise forms.ValidationError("Each threshold is a percent from 1 to 100.")
        return sorted(values)
