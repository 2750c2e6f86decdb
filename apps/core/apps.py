from django.apps import AppConfig


class CoreConfig(AppConfig):
    """No models: installed for its management commands (`runstack`)."""

    name = "apps.core"
    label = "core"
