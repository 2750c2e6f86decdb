"""Webhooks: where an organization wants to hear about its jobs, budgets and endpoints.

- `Webhook` (`wh_…`): a URL of one organization, the event types it subscribes to, a body
  format (`json`, or `slack`: `{"text": …}` for an incoming-webhook URL), an enabled flag and
  a signing secret, stored encrypted (`apps.core.crypto`) and shown once, when it is made.
- `Delivery` (`whd_…`): one event for one webhook, unique per (webhook, event id) so an
  event told twice (signals are at least once) is delivered once. `payload` is the event's
  envelope, fixed when the event happened; each attempt signs it afresh.
- `DeliveryAttempt`: one HTTP try of a delivery: when, the response code or the error.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.core.ids import new_public_id


def new_webhook_id() -> str:
    return new_public_id("wh")


def new_delivery_id() -> str:
    return new_public_id("whd")


class WebhookQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> WebhookQuerySet:
        return self.filter(organization=organization)


class Webhook(models.Model):
    class Format(models.TextChoices):
        JSON = "json", "JSON (signed envelope)"
        SLACK = "slack", 'Slack-compatible ({"text": …})'

    public_id = models.CharField(max_length=32, unique=True, default=new_webhook_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    events = models.JSONField(default=list)
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.JSON)
    enabled = models.BooleanField(default=True)
    # A Fernet token of {"secret": "whsec_…"}; never returned after creation or rotation.
    secret_ciphertext = models.TextField(editable=False)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["organization", "enabled"], name="webhook_org_enabled")]

    def __str__(self) -> str:
        return f"{self.public_id} → {self.url}"


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    public_id = models.CharField(
        max_length=32, unique=True, default=new_delivery_id, editable=False
    )
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # When the next attempt is due (while pending); an attempt in flight pushes it out by
    # its lease, so a worker that dies mid-attempt is picked up again by the sweep.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Retries stop here (the event's time plus WEBHOOK_RETRY_WINDOW_S).
    give_up_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["webhook", "event_id"], name="delivery_once_per_event")
        ]
        indexes = [
            models.Index(fields=["webhook", "-created_at", "-id"], name="delivery_log"),
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_due",
                condition=models.Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.webhook_id}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="delivery_attempt_once")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"

    @property
    def succeeded(self) -> bool:
        return self.response_code is not None and 200 <= self.response_code < 300
