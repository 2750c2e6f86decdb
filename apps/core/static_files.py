"""WhiteNoise's static file serving as a middleware that is async as well as sync.

WhiteNoise's own middleware is sync only, so under ASGI Django handed every request to a
thread for it and back to the event loop for the async middleware after it, before handing
it to a thread again for the view: three crossings, on every runner request too. This one
looks the path up in WhiteNoise's table (a dict lookup, or WhiteNoise's finder when it
refreshes) and only a static file's answer is built on a thread; everything else goes on
in the mode it came in. Configured by WhiteNoise's settings as before.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.whitenoise = WhiteNoiseMiddleware(get_response)
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
