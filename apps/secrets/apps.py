from django.apps import AppConfig


class SecretsConfig(AppConfig):
    name = "apps.secrets"
    label = "secrets"
