"""Seed the accelerator catalog. The data is inlined so the migration keeps meaning what it
meant when written, whatever the app code becomes."""

from django.db import migrations

ACCELERATORS = [
    ("cpu", "CPU only (no accelerator)", "none", 0, [1], []),
    (
        "nvidia-rtx-4090-24gb",
        "NVIDIA GeForce RTX 4090 24GB",
        "nvidia",
        24,
        [1, 2, 3, 4, 5, 6, 7, 8],
        ["pcie"],
    ),
    ("nvidia-l40s-48gb", "NVIDIA L40S 48GB", "nvidia", 48, [1, 2, 4, 8], ["pcie"]),
    ("nvidia-a100-80gb", "NVIDIA A100 80GB", "nvidia", 80, [1, 2, 4, 8], ["pcie", "nvlink"]),
    ("nvidia-h100-80gb", "NVIDIA H100 80GB", "nvidia", 80, [1, 2, 4, 8], ["pcie", "nvlink"]),
    ("nvidia-h200-141gb", "NVIDIA H200 141GB", "nvidia", 141, [1, 2, 4, 8], ["nvlink"]),
    (
        "amd-mi300x-192gb",
        "AMD Instinct MI300X 192GB",
        "amd",
        192,
        [1, 2, 4, 8],
        ["infinity-fabric"],
    ),
]


def seed(apps, schema_editor):
    Accelerator = apps.get_model("catalog", "Accelerator")
    for name, display, vendor, memory, counts, interconnects in ACCELERATORS:
        Accelerator.objects.update_or_create(
            name=name,
            defaults={
                "display_name": display,
                "vendor": vendor,
                "memory_gb": memory,
                "gpu_counts": counts,
                "interconnects": interconnects,
            },
        )


def unseed(apps, schema_editor):
    Accelerator = apps.get_model("catalog", "Accelerator")
    Accelerator.objects.filter(name__in=[row[0] for row in ACCELERATORS]).delete()


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
