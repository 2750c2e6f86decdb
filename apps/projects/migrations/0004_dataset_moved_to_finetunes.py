# Dataset now lives in apps.finetunes (finetunes 0001 took over its state); the table stays.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("projects", "0003_dataset_sha256"),
        ("finetunes", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Dataset")],
            database_operations=[],
        ),
    ]
