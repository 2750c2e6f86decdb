"""The sign-in page, throttled (`apps.accounts.throttle`)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from apps.accounts import throttle


def _address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


class SignInView(auth_views.LoginView):
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
        throttle.sign_in_succeeded(form.get_user().get_username())
        return super().form_valid(form)
