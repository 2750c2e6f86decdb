"""`POST /api/v1/compute/catalog/quotes`: whether a job's compute is obtainable now, and at
what hourly price range (the offers placement would consider, `execution.placement`);
`GET /api/v1/compute/market/ladder`: the offers that could run a job, by price."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import COMPUTE_PERMISSIONS
from apps.core.api import validated
from apps.core.money import micros_to_usd
from apps.core.serializers import StrictSerializer
from apps.jobs.ceilings import markets_for
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
        compute = validated(QuoteIn, request.data)["compute"]
        quote = placement.quote(accelerator=compute["accelerator"], gpu_count=compute["gpu_count"])
        return Response(_quote_body(quote))


class LadderIn(StrictSerializer):
    accelerator = serializers.CharField(max_length=64)
    gpu_count = serializers.IntegerField(min_value=1, max_value=64)
    priority_class = serializers.ChoiceField(
        choices=["standard", "preemptible"], required=False, default="standard"
    )


class LadderRungOut(serializers.Serializer):
    provider = serializers.CharField()
    market = serializers.CharField()
    price_per_gpu_usd_hr = serializers.FloatField()
    price_usd_hr = serializers.FloatField()
    band_per_gpu_usd_hr = PriceRangeOut()
    capacity = serializers.IntegerField()
    free_gpus = serializers.IntegerField()
    available = serializers.BooleanField()


class LadderOut(serializers.Serializer):
    accelerator = serializers.CharField()
    gpu_count = serializers.IntegerField()
    priority_class = serializers.CharField()
    price_to_win_per_gpu_usd_hr = serializers.FloatField(allow_null=True)
    data = LadderRungOut(many=True)
    observed_at = serializers.DateTimeField()


def _rung(offer, gpu_count: int) -> dict:
    return {
        "provider": offer.provider.name,
        "market": offer.market,
        "price_per_gpu_usd_hr": micros_to_usd(offer.price_per_gpu_hour_micros),
        "price_usd_hr": micros_to_usd(offer.job_price_micros_hr),
        "band_per_gpu_usd_hr": {
            "min": micros_to_usd(offer.min_price_per_gpu_hour_micros),
            "max": micros_to_usd(offer.max_price_per_gpu_hour_micros),
        },
        "capacity": offer.capacity,
        "free_gpus": max(offer.free, 0),
        "available": offer.free >= gpu_count,
    }


class LadderView(APIView):
    """`GET /api/v1/compute/market/ladder?accelerator=&gpu_count=[&priority_class=]`: every
    offer that could run such a job (in the markets its priority class may use), cheapest
    first, with its free capacity. `price_to_win_per_gpu_usd_hr` is the lowest price among
    the offers with room now: a ceiling at or above it is placed at once; null when every
    offer is full. Reserves nothing; any member may read it."""

    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(parameters=[LadderIn], responses=LadderOut, summary="The price-to-win ladder")
    def get(self, request):
        wanted = validated(LadderIn, request.query_params.dict())
        offers = placement.offers_with_free_capacity(
            accelerator=wanted["accelerator"],
            gpu_count=wanted["gpu_count"],
            markets=markets_for(wanted["priority_class"]),
            min_free=-(2**31),  # full (even over-committed) offers are rungs too
        )
        winning = [o.price_per_gpu_hour_micros for o in offers if o.free >= wanted["gpu_count"]]
        body = {
            **wanted,
            "price_to_win_per_gpu_usd_hr": micros_to_usd(min(winning)) if winning else None,
            "data": [_rung(offer, wanted["gpu_count"]) for offer in offers],
            "observed_at": timezone.now(),
        }
        return Response(LadderOut(body).data)
