"""The operator's view of the ledger: accounts and transfers are read-only (a transfer is
history; a correction is a new one), budgets are editable, and credits are granted on a
small page of their own ("Grant credits" on the accounts list) through `ledger.grant`."""

from __future__ import annotations

import uuid

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from apps.accounts.models import Organization
from apps.billing import ledger, services
from apps.billing.models import Account, Budget, Transfer
from apps.core.errors import ApiError
from apps.core.ids import new_public_id
from apps.core.money import format_usd, usd_to_micros


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class GrantForm(forms.Form):
    organization = forms.ModelChoiceField(queryset=Organization.objects.order_by("slug"))
    usd = forms.DecimalField(
        label="Amount (USD)", min_value=0.000001, max_digits=15, decimal_places=6
    )
    memo = forms.CharField(max_length=500, required=False)
    # Written when the form is shown: submitting it twice grants once.
    key = forms.CharField(widget=forms.HiddenInput)


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    change_list_template = "admin/billing/account/change_list.html"
    list_display = ["organization", "kind", "balance", "held", "created_at"]
    list_filter = ["kind"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]
    fields = [
        "organization",
        "kind",
        "balance",
        "held",
        "posted_debits",
        "posted_credits",
        "pending_debits",
        "pending_credits",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description="balance")
    def balance(self, account: Account) -> str:
        return format_usd(account.balance_micros)

    @admin.display(description="held")
    def held(self, account: Account) -> str:
        return format_usd(account.pending_debits)

    def get_urls(self):
        grant = path(
            "grant/",
            self.admin_site.admin_view(self.grant_view),
            name="billing_account_grant",
        )
        return [grant, *super().get_urls()]

    def grant_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm("billing.add_transfer"):
            raise PermissionDenied
        form = GrantForm(request.POST or None, initial={"key": f"admin-grant:{uuid.uuid4().hex}"})
        if request.method == "POST" and form.is_valid():
            organization = form.cleaned_data["organization"]
            micros = usd_to_micros(form.cleaned_data["usd"])
            ledger.grant(
                organization=organization,
                amount_micros=micros,
                idempotency_key=form.cleaned_data["key"],
                created_by=request.user,
                memo=form.cleaned_data["memo"] or "granted by an operator",
            )
            balance = ledger.balance(organization.pk).balance_micros
            self.message_user(
                request,
                f"Granted {format_usd(micros)} to {organization.slug}; its balance is "
                f"{format_usd(balance)}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("admin:billing_account_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Grant credits",
            "form": form,
            "opts": self.opts,
        }
        return TemplateResponse(request, "admin/billing/account/grant.html", context)


@admin.register(Transfer)
class TransferAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "organization", "code", "state", "amount", "job", "memo"]
    list_filter = ["code", "state"]
    list_select_related = ["organization", "job"]
    search_fields = ["organization__slug", "idempotency_key", "memo"]
    date_hierarchy = "created_at"

    @admin.display(description="amount", ordering="amount_micros")
    def amount(self, transfer: Transfer) -> str:
        return format_usd(transfer.amount_micros)


class BudgetForm(forms.ModelForm):
    class Meta:
        model = Budget
        fields = ["organization", "project", "name", "period", "limit_micros", "action"]
        fields += ["thresholds"]

    def clean(self):
        cleaned = super().clean()
        budget = self.instance
        for name, value in cleaned.items():
            setattr(budget, name, value)
        if budget.organization_id and budget.limit_micros:
            if budget.project_id and budget.project.organization_id != budget.organization_id:
                raise ValidationError({"project": "The project is another organization's."})
            try:
                services.check_nesting(budget)
            except ApiError as exc:
                raise ValidationError({"limit_micros": str(exc.detail)}) from exc
        return cleaned


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    form = BudgetForm
    list_display = ["public_id", "organization", "project", "period", "limit", "action"]
    list_filter = ["period", "action"]
    list_select_related = ["organization", "project"]
    search_fields = ["public_id", "name", "organization__slug"]
    readonly_fields = ["public_id", "created_by", "created_at", "updated_at"]

    @admin.display(description="limit", ordering="limit_micros")
    def limit(self, budget: Budget) -> str:
        return format_usd(budget.limit_micros)

    def save_model(self, request, obj: Budget, form, change: bool) -> None:
        if not obj.public_id:
            obj.public_id = new_public_id("bud")
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
