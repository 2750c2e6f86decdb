from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

from apps.accounts import views as account_views
from apps.accounts.sign_in import admin_login
from config.schema import SchemaView

# The admin's login is throttled like the site's (before `admin.site.urls` is read).
admin.site.login = admin_login(admin.site)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", account_views.healthz, name="healthz"),
    path("favicon.ico", account_views.favicon, name="favicon"),
    # Pages: each app's `urls.py` (or its `web/urls.py`).
    path("", include("apps.accounts.urls")),
    path("", include("apps.projects.urls")),
    path("", include("apps.jobs.web.urls")),
    path("", include("apps.finetunes.urls")),
    path("", include("apps.sweeps.urls")),
    path("", include("apps.billing.web.urls")),
    path("", include("apps.serving.web.urls")),
    path("", include("apps.playground.urls")),
    path("", include("apps.hub.urls")),
    path("", include("apps.webhooks.urls")),
    # The REST API: each app's `api_urls.py` (or `api/urls.py`), with its full sub-paths.
    path("api/v1/", include("apps.projects.api_urls")),
    path("api/v1/", include("apps.finetunes.api_urls")),
    path("api/v1/", include("apps.sweeps.api_urls")),
    path("api/v1/", include("apps.serving.api_urls")),
    path("api/v1/", include("apps.catalog.api_urls")),
    path("api/v1/", include("apps.secrets.api_urls")),
    path("api/v1/", include("apps.workdirs.api_urls")),
    path("api/v1/", include("apps.jobs.api.urls")),
    path("api/v1/", include("apps.billing.api_urls")),
    path("api/v1/", include("apps.webhooks.api_urls")),
    # What runners call: `runner_urls.py` (or `runner_api/urls.py`).
    path("api/v1/runner/", include("apps.jobs.runner_api.urls")),
    path("api/v1/runner/", include("apps.finetunes.runner_urls")),
    # Other clients' protocols, where their SDKs look for them: the OpenAI-compatible
    # inference API, and the hub (HF_ENDPOINT=<this server>/hf).
    path("v1/", include("apps.serving.proxy_urls")),
    path("hf/", include("apps.hub.hf_urls")),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

handler404 = "apps.core.api_errors.handler404"
handler500 = "apps.core.api_errors.handler500"
handler400 = "apps.core.api_errors.handler400"
