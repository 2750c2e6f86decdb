"""The OpenAPI schema view. The API turns DRF's `?format=` renderer override off (there
`format` is a dataset's field), but the schema keeps drf-spectacular's convention:
`/api/schema/?format=json` answers JSON and `?format=yaml` (or nothing) answers YAML."""

from __future__ import annotations

from drf_spectacular.views import SpectacularAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.settings import api_settings


class _FormatPicksRenderer:
    URL_FORMAT_OVERRIDE = "format"

    def __getattr__(self, name: str):
        return getattr(api_settings, name)


class SchemaNegotiation(DefaultContentNegotiation):
    settings = _FormatPicksRenderer()


class SchemaView(SpectacularAPIView):
    content_negotiation_class = SchemaNegotiation
