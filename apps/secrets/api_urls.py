from django.urls import path

from apps.secrets import api

urlpatterns = [
    path("compute/secrets", api.SecretListCreateView.as_view(), name="api-secrets"),
    path("compute/secrets/<str:secret_id>", api.SecretDetailView.as_view(), name="api-secret"),
]
