from django.apps import AppConfig


class SweepsConfig(AppConfig):
    # Its one hook into jobs (apps/sweeps/hooks.py) is named in apps.jobs.outcomes.
    name = "apps.sweeps"
    label = "sweeps"
    verbose_name = "Sweeps"
