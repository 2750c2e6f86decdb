from django.urls import path

from apps.accounts import api

urlpatterns = [
    path("whoami", api.WhoamiView.as_view(), name="api-whoami"),
]
