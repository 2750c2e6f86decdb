from django.urls import path

from apps.billing.web import views

urlpatterns = [
    path("billing/", views.billing_current, name="billing"),
    path("o/<slug:org_slug>/billing/", views.billing_page, name="billing-page"),
    path("o/<slug:org_slug>/billing/transfers/", views.billing_transfers, name="billing-transfers"),
]
