from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import views
from apps.accounts.sign_in import SignInView

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("orgs/switch/", views.switch_org, name="org-switch"),
    path("o/<slug:org_slug>/settings/", views.org_settings, name="org-settings"),
    path(
        "o/<slug:org_slug>/settings/keys/<int:key_id>/revoke/",
        views.api_key_revoke,
        name="api-key-revoke",
    ),
    path("o/<slug:org_slug>/settings/ssh-keys/", views.ssh_key_add, name="ssh-key-add"),
    path(
        "o/<slug:org_slug>/settings/ssh-keys/<int:key_id>/remove/",
        views.ssh_key_remove,
        name="ssh-key-remove",
    ),
]
