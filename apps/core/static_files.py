"""WhiteNoise's static file serving as a middleware that is async as well as sync.

WhiteNoise's own middleware is sync only, so under ASGI Django handed every request to a
thread for it and back to the event loop for the async middleware after it, before handing
it to a thread again for the view: three crossings, on every runner request too. This one
looks the path up in WhiteNoise's table (a dict lookup, or WhiteNoise's finder when it
refreshes) and only a static file's answer is built on a thread; everything else goes on
in the mode it came in. Configured by WhiteNoise's settings as before.

WhiteNoise reads every static file's headers when it is built (without autorefresh), and
Django builds the middleware chain again for every handler: each test client, each
`call_command` that makes requests. The table is built once per process and configuration
(`_whitenoise`), and handed to every chain after the first.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware

# Besides WHITENOISE_*, what decides which files WhiteNoise finds and how it answers.
_CONFIGURATION = (
    "DEBUG",
    "FORCE_SCRIPT_NAME",
    "STATIC_URL",
    "STATIC_ROOT",
    "STATICFILES_DIRS",
    "STATICFILES_FINDERS",
    "STORAGES",
)
_BUILT: dict[str, WhiteNoiseMiddleware] = {}


def _whitenoise() -> WhiteNoiseMiddleware:
    """WhiteNoise for the settings in force, built once per process and configuration. Only
    its file table and `serve` are used here, never its own `__call__`, so the instance does
    not depend on the chain it was built in."""
    names = [*_CONFIGURATION, *(name for name in dir(settings) if name.startswith("WHITENOISE_"))]
    key = repr([(name, getattr(settings, name, None)) for name in sorted(names)])
    built = _BUILT.get(key)
    if built is None:
        if len(_BUILT) >= 8:  # settings overridden test after test: keep the table small
            _BUILT.clear()
        built = _BUILT[key] = WhiteNoiseMiddleware(get_response=None)
    return built


class StaticFilesMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.whitenoise = _whitenoise()
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _static_file(self, request: HttpRequest):
        if self.whitenoise.autorefresh:
            return self.whitenoise.find_file(request.path_info)
        return self.whitenoise.files.get(request.path_info)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.is_async:
            return self._acall(request)
        static_file = self._static_file(request)
        if static_file is not None:
            return self.whitenoise.serve(static_file, request)
        return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if self.whitenoise.autorefresh:  # the finder may touch the disk
            static_file = await sync_to_async(self._static_file)(request)
        else:
            static_file = self._static_file(request)
        if static_file is not None:
            return await sync_to_async(self.whitenoise.serve)(static_file, request)
        return await self.get_response(request)
