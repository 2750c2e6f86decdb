"""Logs read in (attempt, position, id) order: `LogLine.after_seq` places control-plane
lines among the runner's, and `log_job_order` serves the order. Existing control-plane lines
are placed after the highest seq stored before them (by id), which is where they read until
now."""

import django.db.models.functions.comparison
from django.db import migrations, models


def place_system_lines(apps, schema_editor):
    table = apps.get_model("jobs", "LogLine")._meta.db_table
    schema_editor.execute(
        f"UPDATE {table} SET after_seq = COALESCE(("
        f"SELECT MAX(earlier.seq) FROM {table} AS earlier "
        f"WHERE earlier.job_id = {table}.job_id AND earlier.attempt = {table}.attempt "
        f"AND earlier.seq IS NOT NULL AND earlier.id < {table}.id), 0) "
        "WHERE seq IS NULL"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_attempt_gpu_devices"),
    ]

    operations = [
        migrations.AddField(
            model_name="logline",
            name="after_seq",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(place_system_lines, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="logline",
            index=models.Index(
                models.F("job"),
                models.F("attempt"),
                django.db.models.functions.comparison.Coalesce(
                    models.F("seq"), models.F("after_seq"), models.Value(0)
                ),
                models.F("id"),
                name="log_job_order",
            ),
        ),
    ]
