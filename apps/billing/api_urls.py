from django.urls import path

from apps.billing import api

urlpatterns = [
    path("balance", api.BalanceView.as_view(), name="api-billing-balance"),
    path("summary", api.SummaryView.as_view(), name="api-billing-summary"),
    path("transactions", api.TransactionListView.as_view(), name="api-billing-transactions"),
    path("budgets", api.BudgetListCreateView.as_view(), name="api-billing-budgets"),
    path("budgets/<str:budget_id>", api.BudgetDetailView.as_view(), name="api-billing-budget"),
]
