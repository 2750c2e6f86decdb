"""The operator's catalog: accelerators (seeded) and offers (provider x accelerator x price x
capacity), and providers with their offers inline (here rather than in apps.providers, which
sits below the catalog and knows nothing of offers). Prices are stored in micro-dollars and
shown in dollars."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from apps.catalog.models import Accelerator, Offer
from apps.catalog.services import provider_check
from apps.core.errors import ApiError
from apps.core.money import format_usd
from apps.providers.models import Provider

# Provider kinds whose connection is tested before the admin saves them.
CHECKED_KINDS = {Provider.Kind.SSH, Provider.Kind.SLURM, Provider.Kind.KUBERNETES}


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "vendor", "memory_gb", "reference_usd_per_gpu_hour"]
    search_fields = ["name", "display_name"]

    @admin.display(description="Reference $/GPU-hour")
    def reference_usd_per_gpu_hour(self, accelerator: Accelerator) -> str:
        price = accelerator.reference_price_per_gpu_hour_micros
        return "-" if price is None else format_usd(price)


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


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never shows a value: a form sent back with an error does not echo the
    private key or kubeconfig that was typed into it."""

    def format_value(self, value: object) -> None:
        return None


class ProviderForm(forms.ModelForm):
    """The provider's settings, plus a write-only private key or kubeconfig: never shown
    again, kept when left blank. An SSH, Slurm or Kubernetes provider is saved only once its
    connection test passes."""

    private_key = forms.CharField(
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"rows": 4, "autocomplete": "off"}),
        help_text="SSH private key (write-only: stored encrypted, never shown; blank keeps "
        "the stored one).",
    )

    kubeconfig = forms.CharField(
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"rows": 6, "autocomplete": "off"}),
        help_text="Kubernetes: the kubeconfig's text (write-only: stored encrypted, never "
        "shown; blank keeps the stored one).",
    )

    class Meta:
        model = Provider
        fields = ["name", "kind", "config", "enabled"]

    def clean(self) -> dict:
        data = super().clean()
        credentials = self.instance.credentials() if self.instance.pk else {}
        for key in ("private_key", "kubeconfig"):
            if data.get(key):
                credentials[key] = data[key]
        self.credentials = credentials
        kind = data.get("kind")
        if kind in CHECKED_KINDS and data.get("enabled") and not self.errors:
            try:
                provider_check(kind=kind, config=data.get("config") or {}, credentials=credentials)
            except ApiError as exc:
                raise forms.ValidationError(str(exc.detail)) from exc
        return data

    def save(self, commit: bool = True) -> Provider:
        provider = super().save(commit=False)
        provider.set_credentials(self.credentials)
        if commit:
            provider.save()
        return provider


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    form = ProviderForm
    list_display = ["name", "kind", "enabled", "created_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    inlines = [OfferInline]
