"""Each accelerator's reference price per GPU-hour: what a job for it holds while no enabled
offer could run it (review T3-10: such a job held $0). The seeded catalog gets list prices,
inlined so the migration keeps meaning what it meant when written; an accelerator an
operator added keeps none until the operator sets one."""

from django.db import migrations, models

# Micro-dollars per GPU-hour (per slot-hour for cpu: the local offer's nominal rate).
REFERENCE_PRICES = {
    "cpu": 100_000,
    "nvidia-rtx-4090-24gb": 700_000,
    "nvidia-l40s-48gb": 1_500_000,
    "nvidia-a100-80gb": 2_500_000,
    "nvidia-h100-80gb": 4_000_000,
    "nvidia-h200-141gb": 5_000_000,
    "amd-mi300x-192gb": 4_500_000,
}


def seed(apps, schema_editor):
    Accelerator = apps.get_model("catalog", "Accelerator")
    for name, price in REFERENCE_PRICES.items():
        Accelerator.objects.filter(
            name=name, reference_price_per_gpu_hour_micros__isnull=True
        ).update(reference_price_per_gpu_hour_micros=price)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0004_seed_local_offer")]
    operations = [
        migrations.AddField(
            model_name="accelerator",
            name="reference_price_per_gpu_hour_micros",
            field=models.BigIntegerField(
                blank=True,
                help_text="Reference price per GPU-hour in micro-dollars: what a job for this "
                "accelerator holds while no enabled offer could run it.",
                null=True,
            ),
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
