"""The accelerator catalog: what hardware exists, by a stable name."""

from __future__ import annotations

from django.db import models


class Accelerator(models.Model):
    """A kind of accelerator (or `cpu` for hosts without one), named stably, e.g.
    `nvidia-rtx-4090-24gb`. Jobs and offers refer to it by `name`."""

    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128)
    vendor = models.CharField(max_length=32)
    memory_gb = models.PositiveIntegerField(default=0)
    gpu_counts = models.JSONField(default=list)
    interconnects = models.JSONField(default=list)
    # What a job for it holds per GPU-hour while no enabled offer could run it (a list
    # price); None: such a job must name its own ceiling (`limits.max_price_usd_hr`).
    reference_price_per_gpu_hour_micros = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Reference price per GPU-hour in micro-dollars: what a job for this "
        "accelerator holds while no enabled offer could run it.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class OfferQuerySet(models.QuerySet):
    def enabled(self) -> OfferQuerySet:
        return self.filter(enabled=True, provider__enabled=True)


class Offer(models.Model):
    """A provider's accelerator at a price: `capacity` GPUs in all, rented in any of
    `gpu_counts` per job. Prices are integer micro-dollars per GPU-hour.

    `price_per_gpu_hour_micros` is what an allocation captures now; spot offers move inside
    the band [`min_price_per_gpu_hour_micros`, `max_price_per_gpu_hour_micros`], which is what
    a quote reports. On-demand offers have a band of one price."""

    class Market(models.TextChoices):
        ON_DEMAND = "on_demand", "On demand"
        SPOT = "spot", "Spot"

    provider = models.ForeignKey(
        "providers.Provider", on_delete=models.CASCADE, related_name="offers"
    )
    accelerator = models.ForeignKey(Accelerator, on_delete=models.PROTECT, related_name="offers")
    gpu_counts = models.JSONField(default=list)
    capacity = models.PositiveIntegerField(help_text="GPUs (or slots for cpu) in total")
    market = models.CharField(max_length=16, choices=Market.choices, default=Market.ON_DEMAND)
    price_per_gpu_hour_micros = models.BigIntegerField()
    min_price_per_gpu_hour_micros = models.BigIntegerField()
    max_price_per_gpu_hour_micros = models.BigIntegerField()
    enabled = models.BooleanField(default=True)

    objects = OfferQuerySet.as_manager()

    class Meta:
        ordering = ["price_per_gpu_hour_micros", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(min_price_per_gpu_hour_micros__gte=0)
                & models.Q(min_price_per_gpu_hour_micros__lte=models.F("price_per_gpu_hour_micros"))
                & models.Q(
                    price_per_gpu_hour_micros__lte=models.F("max_price_per_gpu_hour_micros")
                ),
                name="offer_price_inside_band",
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider.name}: {self.accelerator.name} x{self.capacity}"
