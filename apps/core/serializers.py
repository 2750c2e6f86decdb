"""The base of every API input serializer."""

from __future__ import annotations

from rest_framework import serializers


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not know, so a typo is an error rather than silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: "Unknown field."})
        return super().to_internal_value(data)
