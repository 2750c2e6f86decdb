"""Who is calling, for which organization, with which role.

Every page, API view and websocket consumer resolves a `Caller` first and scopes its queries
to `caller.organization`. A caller never sees another organization's objects: they are
looked up inside the caller's organization, so they are simply not found (404).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import Http404, HttpRequest

from apps.accounts.models import ApiKey, Membership, Organization, User, role_at_least

SESSION_ORG_KEY = "trainyard_org"
ORG_HEADER = "HTTP_X_TRAINYARD_ORG"


@dataclass(frozen=True)
class Caller:
    organization: Organization
    role: str
    user: User | None = None
    api_key: ApiKey | None = None

    def can(self, minimum: str) -> bool:
        return role_at_least(self.role, minimum)


def membership_for_slug(user: User, org_slug: str) -> Membership:
    """The user's membership in the organization named by `org_slug`, or 404 — the same
    answer whether the organization exists or not."""
    membership = Membership.objects.for_user(user).filter(organization__slug=org_slug).first()
    if membership is None:
        raise Http404("No such organization.")
    return membership


def caller_for_membership(membership: Membership) -> Caller:
    return Caller(organization=membership.organization, role=membership.role, user=membership.user)


def caller_for_api_key(key: ApiKey) -> Caller:
    return Caller(organization=key.organization, role=key.role, api_key=key)


def default_membership(request: HttpRequest, user: User) -> Membership | None:
    """For a signed-in user without an org in the URL: the org named by the
    `X-Trainyard-Org` header, else the one they last opened, else their first."""
    memberships = Membership.objects.for_user(user)
    wanted = request.META.get(ORG_HEADER) or request.session.get(SESSION_ORG_KEY)
    if wanted:
        chosen = memberships.filter(organization__slug=wanted).first()
        if chosen is not None or request.META.get(ORG_HEADER):
            return chosen
    return memberships.order_by("created_at", "id").first()


def remember_org(request: HttpRequest, org: Organization) -> None:
    if request.session.get(SESSION_ORG_KEY) != org.slug:
        request.session[SESSION_ORG_KEY] = org.slug
