"""`Authorization: Bearer <key>` authentication for the REST API."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.accounts.keys import key_matches, parse_key
from apps.accounts.models import ApiKey


class KeyPrincipal:
    """Stands in `request.user` for a request made with an API key. The key belongs to an
    organization, not to a person; views read the key from `request.auth`."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    pk = None

    def __init__(self, key: ApiKey) -> None:
        self.key = key

    def __str__(self) -> str:
        return f"api key {self.key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        raw = raw.strip()
        parsed = parse_key(raw)
        if parsed is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        key = (
            ApiKey.objects.active()
            .select_related("organization")
            .filter(prefix=parsed.prefix)
            .first()
        )
        if key is None or not key_matches(parsed.full, key.hashed_key):
            raise exceptions.AuthenticationFailed("Invalid API key.")
        touch_key(key)
        return KeyPrincipal(key), key

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'


def touch_key(key: ApiKey) -> None:
    """Record use at most once per interval: a hot key costs no write per request."""
    now = timezone.now()
    interval = timedelta(seconds=settings.API_KEY_TOUCH_INTERVAL_S)
    if key.last_used_at is None or now - key.last_used_at >= interval:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


# Described to drf-spectacular here, beside the class: defining it registers it.
class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.accounts.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An organization API key: `Authorization: Bearer ty_…`.",
        }
