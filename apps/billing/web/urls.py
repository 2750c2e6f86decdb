from django.urls import path

from apps.billing.web import budgets, views

urlpatterns = [
    path("billing/", views.billing_current, name="billing"),
    path("o/<slug:org_slug>/billing/", views.billing_page, name="billing-page"),
    path("o/<slug:org_slug>/billing/transfers/", views.billing_transfers, name="billing-transfers"),
    path("o/<slug:org_slug>/billing/budgets/", budgets.budget_create, name="billing-budget-create"),
    path(
        "o/<slug:org_slug>/billing/budgets/<str:budget_id>/",
        budgets.budget_edit,
        name="billing-budget-edit",
    ),
    path(
        "o/<slug:org_slug>/billing/budgets/<str:budget_id>/delete/",
        budgets.budget_delete,
        name="billing-budget-delete",
    ),
]
