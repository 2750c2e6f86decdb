"""The base of every API input serializer, and the fields our output serializers share."""

from __future__ import annotations

from datetime import datetime

from rest_framework import serializers

from apps.core.money import micros_to_usd


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not know, so a typo is an error rather than silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: "Unknown field."})
        return super().to_internal_value(data)


class UsdField(serializers.FloatField):
    """Micro-dollars out as dollars (a number), the `*_usd` twin of a `*_ucredits` field."""

    def to_representation(self, value: int) -> float | None:
        return micros_to_usd(value)


class IsoDateTimeField(serializers.DateTimeField):
    """A time written as Python's `isoformat` writes it (`+00:00`, where DRF's DateTimeField
    writes `Z`): the billing API has answered so from its first version."""

    def to_representation(self, value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None
