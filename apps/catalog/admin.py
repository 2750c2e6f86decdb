"""The operator's catalog: accelerators (seeded) and offers (provider x accelerator x price x
capacity). Prices are stored in micro-dollars and shown in dollars."""

from __future__ import annotations

from django.contrib import admin

from apps.catalog.models import Accelerator, Offer


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
        price = usd(offer.price_per_gpu_hour_micros)
        if offer.min_price_per_gpu_hour_micros == offer.max_price_per_gpu_hour_micros:
            return price
        low = usd(offer.min_price_per_gpu_hour_micros)
        high = usd(offer.max_price_per_gpu_hour_micros)
        return f"{price} (band {low} to {high})"


def usd(micros: int) -> str:
    """Dollars for people: cents when the amount is whole cents, else every digit kept."""
    if micros % 10_000 == 0:
        return f"${micros / 1_000_000:,.2f}"
    return f"${micros / 1_000_000:,.6f}".rstrip("0")
