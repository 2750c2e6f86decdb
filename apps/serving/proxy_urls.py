"""The OpenAI-compatible paths (`/v1/…`), beside the REST API (`/api/v1/…`)."""

from django.urls import path

from apps.serving import proxy

urlpatterns = [
    path("chat/completions", proxy.chat_completions, name="openai-chat-completions"),
    path("completions", proxy.completions, name="openai-completions"),
    path("models", proxy.models, name="openai-models"),
]
