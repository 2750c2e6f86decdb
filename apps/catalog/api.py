"""`/api/v1/compute/catalog/accelerators`: the accelerator catalog. Quotes, which count the
jobs on each offer, are `apps.jobs.api.quotes`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import COMPUTE_PERMISSIONS
from apps.catalog.models import Accelerator


class AcceleratorOut(serializers.ModelSerializer):
    class Meta:
        model = Accelerator
        fields = ["name", "display_name", "vendor", "memory_gb", "gpu_counts", "interconnects"]


class AcceleratorListView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(responses=AcceleratorOut(many=True), summary="List accelerators")
    def get(self, request):
        data = AcceleratorOut(Accelerator.objects.order_by("name"), many=True).data
        return Response({"data": data, "next_cursor": None, "total": len(data)})
