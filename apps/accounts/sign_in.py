"""The sign-in pages, the site's and the admin's, throttled alike (`apps.accounts.throttle`)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache

from apps.accounts import throttle


def _address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


class SignInView(auth_views.LoginView):
    """Django's login view, refusing with 429 and Retry-After what the throttle refuses."""

    template_name = "accounts/login.html"

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = request.POST.get("username", "")
        wait = throttle.sign_in_blocked_for(username, _address(request))
        if wait:
            minutes = max(1, round(wait / 60))
            form = self.get_form_class()(request, initial={"username": username})
            response = TemplateResponse(
                request,
                self.template_name,
                {
                    **self.get_context_data(form=form),
                    "throttled": f"Too many failed sign-ins. Try again in about {minutes} "
                    f"minute{'s' if minutes != 1 else ''}.",
                },
                status=429,
            )
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form) -> HttpResponse:
        throttle.sign_in_failed(self.request.POST.get("username", ""), _address(self.request))
        return super().form_invalid(form)

    def form_valid(self, form) -> HttpResponse:
        throttle.sign_in_succeeded(form.get_user().get_username(), _address(self.request))
        return super().form_valid(form)


def admin_login(site: AdminSite) -> Callable[..., HttpResponse]:
    """`site.login` with the site's throttle: Django's `AdminSite.login`, whose view class
    cannot be swapped, with `SignInView` in place of `LoginView` (install it with
    `site.login = admin_login(site)` before `site.urls` is read)."""

    @never_cache
    def login(request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        if request.method == "GET" and site.has_permission(request):
            return HttpResponseRedirect(reverse("admin:index", current_app=site.name))
        context = {
            **site.each_context(request),
            "title": _("Log in"),
            "subtitle": None,
            "app_path": request.get_full_path(),
            "username": request.user.get_username(),
        }
        if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
            context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=site.name)
        context.update(extra_context or {})
        request.current_app = site.name
        return SignInView.as_view(
            extra_context=context,
            authentication_form=site.login_form or AdminAuthenticationForm,
            template_name="accounts/admin_login.html",
        )(request)

    return login
