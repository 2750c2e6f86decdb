"""Seed a `local` provider with a `cpu` offer so a fresh install can run jobs on this host.
Its price is a nominal internal chargeback rate ($0.10 per slot-hour); operators change it,
its capacity (2 slots) and add GPU offers in the Django admin."""

from django.db import migrations

LOCAL_PRICE_MICROS = 100_000


def seed(apps, schema_editor):
    Provider = apps.get_model("providers", "Provider")
    Offer = apps.get_model("catalog", "Offer")
    Accelerator = apps.get_model("catalog", "Accelerator")
    provider, _ = Provider.objects.get_or_create(
        name="local", defaults={"kind": "local", "config": {}, "enabled": True}
    )
    cpu = Accelerator.objects.get(name="cpu")
    if not Offer.objects.filter(provider=provider, accelerator=cpu).exists():
        Offer.objects.create(
            provider=provider,
            accelerator=cpu,
            gpu_counts=[1],
            capacity=2,
            market="on_demand",
            price_per_gpu_hour_micros=LOCAL_PRICE_MICROS,
            min_price_per_gpu_hour_micros=LOCAL_PRICE_MICROS,
            max_price_per_gpu_hour_micros=LOCAL_PRICE_MICROS,
        )


def unseed(apps, schema_editor):
    apps.get_model("providers", "Provider").objects.filter(name="local").delete()


class Migration(migrations.Migration):
    dependencies = [("catalog", "0003_offer"), ("providers", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
