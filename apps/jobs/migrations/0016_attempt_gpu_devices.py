# Each GPU attempt's own device indices on its host (issue 36, T3-8). Attempts live before
# this migration hold none: they keep what they were started with until they end.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_log_line_job_without_constraint"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="gpu_devices",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
