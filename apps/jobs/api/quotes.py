"""`POST /api/v1/compute/catalog/quotes`: whether a job's compute is obtainable now, and at
what hourly price range (the offers placement would consider, `execution.placement`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import COMPUTE_PERMISSIONS
from apps.core.api_errors import first_validation_error
from apps.core.errors import InvalidRequest
from apps.core.money import micros_to_usd
from apps.core.serializers import StrictSerializer
from apps.jobs.execution import placement
from apps.jobs.specs import ComputeIn


class QuoteContainerIn(StrictSerializer):
    image = serializers.CharField(max_length=500)


class QuoteAccessIn(StrictSerializer):
    ssh = serializers.BooleanField(required=False, default=False)


class QuoteIn(StrictSerializer):
    """The reference's quote body. Only `compute` decides the answer today; `container` and
    `access` are validated so that a body that quotes cleanly is shaped like a job's."""

    resource_type = serializers.ChoiceField(choices=["job"])
    compute = ComputeIn()
    container = QuoteContainerIn(required=False)
    access = QuoteAccessIn(required=False)


class PriceRangeOut(serializers.Serializer):
    min = serializers.FloatField()
    max = serializers.FloatField()


class QuoteOut(serializers.Serializer):
    available = serializers.BooleanField()
    price_usd_hr = PriceRangeOut(allow_null=True)
    observed_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


def _quote_body(quote: placement.QuoteResult) -> dict:
    price = None
    if quote.available:
        price = {
            "min": micros_to_usd(quote.price_min_micros_hr),
            "max": micros_to_usd(quote.price_max_micros_hr),
        }
    # A quote is an observation, not a held price: nothing makes it expire.
    return QuoteOut(
        {
            "available": quote.available,
            "price_usd_hr": price,
            "observed_at": quote.observed_at,
            "expires_at": None,
        }
    ).data


class QuoteView(APIView):
    """Whether a job's compute is obtainable now and at what hourly price range. A valid
    request is always 200 (unobtainable is `available: false`); it reserves nothing, so
    any member of the organization may ask, viewers included."""

    permission_classes = COMPUTE_PERMISSIONS
    write_role = Role.VIEWER

    @extend_schema(request=QuoteIn, responses=QuoteOut, summary="Quote price and availability")
    def post(self, request):
        body = QuoteIn(data=request.data)
        if not body.is_valid():
            param, message = first_validation_error(body.errors)
            raise InvalidRequest(message, param=param)
        compute = body.validated_data["compute"]
        quote = placement.quote(accelerator=compute["accelerator"], gpu_count=compute["gpu_count"])
        return Response(_quote_body(quote))
