"""Plain Django views under /api/ and /v1/ for the JSON-errors tests (not DRF: their errors
are Django's own HTML unless the middleware answers)."""

from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_POST


def boom(request):
    raise RuntimeError("boom")


@require_POST
def post_only(request):
    return HttpResponse("ok")


urlpatterns = [
    path("api/boom", boom),
    path("v1/boom", boom),
    path("api/post-only", post_only),
    path("", include("config.urls")),
]
