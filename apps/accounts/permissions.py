"""API permissions. `caller(request)` resolves the organization and role once per request;
the classes here decide on it."""

from __future__ import annotations

from rest_framework import exceptions, permissions

from apps.accounts.models import ApiKey, Role
from apps.accounts.tenancy import (
    Caller,
    caller_for_api_key,
    caller_for_membership,
    default_membership,
)
from apps.core.errors import TenantDisabled


def caller(request) -> Caller:
    """The organization, role and principal behind an authenticated API request."""
    cached = getattr(request, "_trainyard_caller", None)
    if cached is not None:
        return cached
    if isinstance(request.auth, ApiKey):
        resolved = caller_for_api_key(request.auth)
    else:
        membership = default_membership(request._request, request.user)
        if membership is None:
            raise exceptions.NotFound("No such organization.")
        resolved = caller_for_membership(membership)
    request._trainyard_caller = resolved
    return resolved


class IsOrgMember(permissions.BasePermission):
    """Any member may read; writing needs at least `member` (viewers are read-only).
    A view may raise the bar with `write_role = Role.ADMIN`."""

    message = "Your role in this organization does not allow this."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        resolved = caller(request)
        if request.method in permissions.SAFE_METHODS:
            return True
        return resolved.can(getattr(view, "write_role", Role.MEMBER))


class ComputeEnabled(permissions.BasePermission):
    """Compute endpoints are a fail-closed allow-list per organization."""

    def has_permission(self, request, view) -> bool:
        if not caller(request).organization.compute_enabled:
            raise TenantDisabled()
        return True


COMPUTE_PERMISSIONS = [IsOrgMember, ComputeEnabled]
