from django.urls import path

from apps.billing import api, usage_api

urlpatterns = [
    path("billing/balance", api.BalanceView.as_view(), name="api-billing-balance"),
    path("billing/summary", api.SummaryView.as_view(), name="api-billing-summary"),
    path(
        "billing/transactions", api.TransactionListView.as_view(), name="api-billing-transactions"
    ),
    path("billing/budgets", api.BudgetListCreateView.as_view(), name="api-billing-budgets"),
    path(
        "billing/budgets/<str:budget_id>",
        api.BudgetDetailView.as_view(),
        name="api-billing-budget",
    ),
    # Usage is read beside the jobs that make it.
    path("compute/usage", usage_api.UsageView.as_view(), name="api-usage"),
    path("compute/usage.csv", usage_api.UsageCsvView.as_view(), name="api-usage-csv"),
]
