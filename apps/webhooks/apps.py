from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"

    def ready(self) -> None:
        # Connects the receivers of the signals jobs, billing and serving send.
        from apps.webhooks import receivers  # noqa: F401
