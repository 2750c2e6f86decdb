from django.urls import path

from apps.billing import usage_api

urlpatterns = [
    path("usage", usage_api.UsageView.as_view(), name="api-usage"),
    path("usage.csv", usage_api.UsageCsvView.as_view(), name="api-usage-csv"),
]
