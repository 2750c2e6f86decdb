# The Dataset content type follows the model to its new app. The row keeps its id, so
# permissions and admin log entries that point at it stay valid. Reversible.

from django.db import migrations


def _relabel(apps, from_label: str, to_label: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    old = content_type.objects.filter(app_label=from_label, model="dataset").first()
    if old is None:
        return  # a database migrated from scratch: post_migrate creates the row later
    # A row under the new label can exist only if post_migrate ran in between; it has
    # nothing pointing at it yet, while the old one may.
    content_type.objects.filter(app_label=to_label, model="dataset").exclude(pk=old.pk).delete()
    old.app_label = to_label
    old.save(update_fields=["app_label"])


def forwards(apps, schema_editor) -> None:
    _relabel(apps, "projects", "finetunes")


def backwards(apps, schema_editor) -> None:
    _relabel(apps, "finetunes", "projects")


class Migration(migrations.Migration):
    dependencies = [
        ("finetunes", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
