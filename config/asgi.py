"""The ASGI entry point: Django for HTTP behind a guard that refuses oversized bodies before
they are read (`config/body_limits.py`) and admission control that bounds how many runner
requests run at once (`config/admission.py`), Channels for websockets (session auth,
checked origin). Consumers are registered in `config/routing.py`."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from config.admission import admit_runner_requests  # noqa: E402
from config.body_limits import guard_request_bodies  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402

runner_admission = admit_runner_requests(django_asgi_app)
application = ProtocolTypeRouter(
    {
        "http": guard_request_bodies(runner_admission),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# What is loaded by now (Django, every app, the URL map with its views) lives as long as the
# process: frozen out of the garbage collector's reach, so the full collections that a
# 5,000-line log batch's thousands of new objects set off no longer walk those ~135,000
# objects each time (parsing a batch: 15.6 → 7.5 ms).
get_resolver().url_patterns  # noqa: B018 (loads every view module now, not on request one)
gc.freeze()
