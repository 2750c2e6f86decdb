"""`/api/v1/compute/catalog/accelerators`: the accelerator catalog. Quotes, which count the
jobs on each offer, are `apps.jobs.api.quotes`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS
from apps.catalog.models import Accelerator
from apps.core.api import page, page_out


class AcceleratorOut(serializers.ModelSerializer):
    class Meta:
        model = Accelerator
        fields = ["name", "display_name", "vendor", "memory_gb", "gpu_counts", "interconnects"]


# The whole catalog in one page, by name.
AcceleratorPage = page_out(AcceleratorOut, "AcceleratorPage")


class AcceleratorListView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(
        responses=AcceleratorPage,
        summary="List accelerators",
        operation_id="v1_compute_catalog_accelerators_list",
    )
    def get(self, request):
        accelerators = list(Accelerator.objects.order_by("name"))
        return page(accelerators, AcceleratorOut, next_cursor=None, total=len(accelerators))
