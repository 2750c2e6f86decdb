from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("providers", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="provider",
            name="credentials_encrypted",
            field=models.TextField(blank=True, default="", editable=False),
        ),
    ]
