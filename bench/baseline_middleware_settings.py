"""`bench_runner_requests.py`'s baseline server: the suite's settings with the middleware
chain Django's defaults give (WhiteNoise's own sync-only middleware, no
`SyncChainMiddleware`), so that a request crosses between the event loop and its thread
for nearly every middleware, as it did before `apps.core.static_files` and
`apps.core.middleware.SyncChainMiddleware`."""

from config.test_settings import *  # noqa: F403

MIDDLEWARE = [
    "whitenoise.middleware.WhiteNoiseMiddleware" if path.endswith("StaticFilesMiddleware") else path
    for path in MIDDLEWARE  # noqa: F405
    if not path.endswith("SyncChainMiddleware")
]
