from django.apps import AppConfig


class HubConfig(AppConfig):
    name = "apps.hub"
    label = "hub"
    verbose_name = "Hub"
