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

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
