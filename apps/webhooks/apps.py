from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    # Its hooks (apps/webhooks/hooks.py) are named by dotted path where jobs, billing and
    # serving call them: nothing to connect here.
    name = "apps.webhooks"
    label = "webhooks"
