from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "apps.sweeps"
    label = "sweeps"
    verbose_name = "Sweeps"

    def ready(self) -> None:
        # The one hook into jobs: a trial's job reaching an outcome advances its sweep.
        from apps.sweeps import receivers  # noqa: F401
