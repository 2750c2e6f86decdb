"""Providers are operator-managed in the Django admin, each with its offers inline."""

from __future__ import annotations

from django.contrib import admin

from apps.catalog.models import Offer
from apps.providers.models import Provider


class OfferInline(admin.TabularInline):
    model = Offer
    extra = 0
    fields = [
        "accelerator",
        "market",
        "capacity",
        "gpu_counts",
        "price_per_gpu_hour_micros",
        "min_price_per_gpu_hour_micros",
        "max_price_per_gpu_hour_micros",
        "enabled",
    ]
    show_change_link = True


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "enabled", "created_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    inlines = [OfferInline]
