from django.apps import AppConfig


class WorkdirsConfig(AppConfig):
    name = "apps.workdirs"
    label = "workdirs"
