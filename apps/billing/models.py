"""The ledger: accounts, immutable transfers, meters, budgets and their notices.

Money is integer micro-dollars (1,000,000 = $1, the "ucredit"). Every organization has three
accounts: its `wallet`, and two system accounts, `grants` (where credits come from) and
`usage` (where spend goes). A transfer moves an amount from one account (debit) to another
(credit); every row is balanced on its own, so the accounts always sum to zero.

Two-phase holds (as TigerBeetle has them): a `pending` transfer reserves money; a later
transfer with `pending` pointing at it posts or voids it. No row is ever changed: on
PostgreSQL a trigger refuses UPDATE and DELETE on the transfer table (migration 0002), and a
correction is a new transfer. The accounts cache their sums, changed in the same transaction
as each transfer (`apps.billing.ledger`); `ledger.audit` recomputes them.

Billing refers to jobs and attempts by string foreign key and imports nothing of `jobs`:
jobs call billing's services.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.projects.models import Project


class Account(models.Model):
    class Kind(models.TextChoices):
        WALLET = "wallet"
        GRANTS = "grants"
        USAGE = "usage"

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="billing_accounts"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    posted_debits = models.BigIntegerField(default=0)
    posted_credits = models.BigIntegerField(default=0)
    pending_debits = models.BigIntegerField(default=0)
    pending_credits = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "kind"], name="account_org_kind")
        ]

    def __str__(self) -> str:
        return f"{self.organization_id}:{self.kind}"

    @property
    def balance_micros(self) -> int:
        return self.posted_credits - self.posted_debits


class Transfer(models.Model):
    class Code(models.TextChoices):
        GRANT = "grant"
        HOLD = "hold"
        USAGE = "usage"
        REFUND = "refund"
        CORRECTION = "correction"

    class State(models.TextChoices):
        POSTED = "posted"
        PENDING = "pending"
        VOIDED = "voided"

    debit_account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    credit_account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    amount_micros = models.BigIntegerField()
    code = models.CharField(max_length=16, choices=Code.choices)
    state = models.CharField(max_length=16, choices=State.choices)
    # The pending transfer this one posts or voids (at most one resolution each).
    pending = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="resolution"
    )
    idempotency_key = models.CharField(max_length=255, unique=True)
    # Denormalised for scoping and rollups: the organization whose wallet this touches.
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    attempt = models.ForeignKey(
        "jobs.Attempt", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Usage only: the whole minutes this transfer bills (its attempt's minutes before it
    # are `minutes_to - minutes`).
    minutes = models.PositiveIntegerField(default=0)
    minutes_to = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    memo = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(amount_micros__gt=0), name="transfer_amount_positive"
            ),
            models.CheckConstraint(
                condition=~Q(debit_account=models.F("credit_account")),
                name="transfer_accounts_differ",
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "id"], name="transfer_org_id"),
            models.Index(
                fields=["organization", "code", "created_at"], name="transfer_org_code_at"
            ),
            models.Index(fields=["project", "code", "created_at"], name="transfer_project_code_at"),
            models.Index(fields=["job", "code"], name="transfer_job_code"),
        ]

    def __str__(self) -> str:
        return f"{self.code} {self.state} {self.amount_micros}"


class Meter(models.Model):
    """What billing knows of one attempt: its captured price and the minutes and money
    posted for it so far. Open (no `ended_at`) while the attempt holds hardware: the
    organization's burn rate is the sum of its open meters' prices."""

    attempt = models.OneToOneField("jobs.Attempt", on_delete=models.PROTECT, related_name="+")
    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="+")
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    resource_type = models.CharField(max_length=16, default="job")
    resource_id = models.CharField(max_length=32)
    resource_name = models.CharField(max_length=200)
    price_micros_hr = models.BigIntegerField()
    billed_minutes = models.PositiveIntegerField(default=0)
    posted_micros = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["organization"], condition=Q(ended_at__isnull=True), name="meter_open_org"
            )
        ]

    def __str__(self) -> str:
        return f"meter of attempt {self.attempt_id}"


class Budget(models.Model):
    class Period(models.TextChoices):
        DAY = "day"
        WEEK = "week"
        MONTH = "month"
        LIFETIME = "lifetime"

    class Action(models.TextChoices):
        ALERT = "alert"
        BLOCK = "block"
        TERMINATE = "terminate"

    public_id = models.CharField(max_length=32, unique=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="budgets")
    # None: the whole organization.
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    name = models.CharField(max_length=200, blank=True)
    period = models.CharField(max_length=16, choices=Period.choices, default=Period.MONTH)
    limit_micros = models.BigIntegerField()
    action = models.CharField(max_length=16, choices=Action.choices, default=Action.ALERT)
    thresholds = models.JSONField(default=list)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(limit_micros__gt=0), name="budget_limit_positive")
        ]

    def __str__(self) -> str:
        return f"{self.period} budget {self.public_id}"


class BudgetNotice(models.Model):
    """A budget crossed one of its thresholds in one period: written once (the unique
    constraint decides between racing passes), then mailed and pushed."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="notices")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    period_start = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField()
    spent_micros = models.BigIntegerField()
    limit_micros = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="budget_notice_once"
            )
        ]
        indexes = [models.Index(fields=["organization", "-id"], name="budget_notice_org")]

    def __str__(self) -> str:
        return f"{self.threshold}% of budget {self.budget_id}"
