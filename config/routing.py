"""Websocket routes. Each app's consumers join here as they arrive."""

websocket_urlpatterns: list = []
