from django.urls import path

from apps.webhooks import views

PREFIX = "o/<slug:org_slug>/settings/webhooks/"

urlpatterns = [
    path(PREFIX, views.webhooks_page, name="org-webhooks"),
    path(f"{PREFIX}<str:webhook_id>/", views.webhook_card, name="webhook-card"),
    path(f"{PREFIX}<str:webhook_id>/test/", views.webhook_test, name="webhook-test"),
    path(f"{PREFIX}<str:webhook_id>/toggle/", views.webhook_toggle, name="webhook-toggle"),
    path(f"{PREFIX}<str:webhook_id>/rotate/", views.webhook_rotate, name="webhook-rotate"),
    path(f"{PREFIX}<str:webhook_id>/delete/", views.webhook_delete, name="webhook-delete"),
]
