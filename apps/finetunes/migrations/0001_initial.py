# Dataset moves here from apps.projects. Only Django's model state moves: the table keeps
# its name (projects_dataset), so no SQL runs and every row and file stays where it is.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import apps.finetunes.models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("projects", "0003_dataset_sha256"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Dataset",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "public_id",
                            models.CharField(
                                default=apps.finetunes.models.new_dataset_id,
                                editable=False,
                                max_length=32,
                                unique=True,
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        (
                            "file",
                            models.FileField(
                                max_length=500, upload_to=apps.finetunes.models.dataset_upload_to
                            ),
                        ),
                        (
                            "dataset_format",
                            models.CharField(
                                choices=[
                                    ("alpaca", "Alpaca"),
                                    ("chatml", "ChatML"),
                                    ("sharegpt", "ShareGPT"),
                                    ("prompt_completion", "Prompt-completion"),
                                    ("text", "Plain text"),
                                    ("pretokenized", "Pre-tokenized"),
                                ],
                                max_length=32,
                            ),
                        ),
                        ("rows", models.PositiveIntegerField()),
                        ("size_bytes", models.PositiveBigIntegerField()),
                        ("sha256", models.CharField(blank=True, default="", max_length=64)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "project",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="datasets",
                                to="projects.project",
                            ),
                        ),
                        (
                            "uploaded_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "projects_dataset",
                        "ordering": ["-created_at"],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
