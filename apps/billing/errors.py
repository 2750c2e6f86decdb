"""Billing's API errors (stable `error_type`s clients branch on)."""

from __future__ import annotations

from rest_framework import status

from apps.core.errors import ApiError


class InsufficientBalance(ApiError):
    status_code = status.HTTP_402_PAYMENT_REQUIRED
    error_type = "insufficient_balance"
    default_detail = "The organization's available balance does not cover this job."


class BudgetExceeded(ApiError):
    status_code = status.HTTP_402_PAYMENT_REQUIRED
    error_type = "budget_exceeded"
    default_detail = "A budget of this organization or project is spent."
