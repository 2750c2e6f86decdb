from django.apps import AppConfig


class FinetunesConfig(AppConfig):
    name = "apps.finetunes"
    label = "finetunes"
    verbose_name = "Fine-tunes"
