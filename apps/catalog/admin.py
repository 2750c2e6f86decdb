"""The operator's catalog: accelerators (seeded) and offers (provider x accelerator x price x
capacity), and providers with their offers inline (here rather than in apps.providers, which
sits below the catalog and knows nothing of offers). Prices are stored in micro-dollars and
shown in dollars."""

from __future__ import annotations

from django.contrib import admin

from apps.catalog.models import Accelerator, Offer
from apps.core.money import format_usd
from apps.providers.models import Provider


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "vendor", "memory_gb"]
    search_fields = ["name", "display_name"]


@admin.register(Offer)
class OfferAdmin(admin.ModelAdmin):
    list_display = [
        "provider",
        "accelerator",
        "market",
        "capacity",
        "gpu_counts",
        "price_usd_per_gpu_hour",
        "enabled",
    ]
    list_filter = ["enabled", "market", "provider", "accelerator"]
    list_select_related = ["provider", "accelerator"]
    search_fields = ["provider__name", "accelerator__name"]

    @admin.display(description="$/GPU-hour", ordering="price_per_gpu_hour_micros")
    def price_usd_per_gpu_hour(self, offer: Offer) -> str:
        price = format_usd(offer.price_per_gpu_hour_micros)
        if offer.min_price_per_gpu_hour_micros == offer.max_price_per_gpu_hour_micros:
            return price
        low = format_usd(offer.min_price_per_gpu_hour_micros)
        high = format_usd(offer.max_price_per_gpu_hour_micros)
        return f"{price} (band {low} to {high})"


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
