from django.urls import path

from apps.catalog import api

urlpatterns = [
    path(
        "compute/catalog/accelerators", api.AcceleratorListView.as_view(), name="api-accelerators"
    ),
]
