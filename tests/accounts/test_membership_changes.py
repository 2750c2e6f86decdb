"""A key never outlives its creator's rights: removing someone from an organization revokes
the keys they created for it, and lowering their role caps those keys to the new role — by
the services and by every Django admin path that removes or changes a membership."""

import uuid

import pytest
from rest_framework.test import APIClient

from apps.accounts import services
from apps.accounts.models import ApiKey, Membership, Role
from apps.jobs.models import Job
from tests.factories import MembershipFactory, UserFactory
from tests.jobs.helpers import job_body

pytestmark = pytest.mark.django_db


def _bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _key_of(user, org, role: str) -> tuple[ApiKey, str]:
    # Names are unique among an organization's active keys: each person's carry their name.
    name = f"{user.username}-{role}-key"
    return services.api_key_create(organization=org, name=name, role=role, created_by=user)


def _membership(user, org) -> Membership:
    return Membership.objects.get(user=user, organization=org)


def _post_job(key: str):
    return _bearer(key).post(
        "/api/v1/compute/jobs", job_body(), format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
    )


@pytest.fixture
def operator_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_removing_a_member_revokes_the_keys_they_made_for_that_org_only(
    org, other_org, member, admin
):
    _, theirs = _key_of(member, org, Role.MEMBER)
    _, colleagues = _key_of(admin, org, Role.ADMIN)
    _, unowned = services.api_key_create(organization=org, name="deploy")
    MembershipFactory(user=member, organization=other_org, role=Role.MEMBER)
    _, elsewhere = _key_of(member, other_org, Role.MEMBER)
    assert _bearer(theirs).get("/api/v1/whoami").status_code == 200

    assert services.membership_remove(membership=_membership(member, org)) == 1

    denied = _bearer(theirs).get("/api/v1/whoami")
    assert denied.status_code == 401
    assert denied.json()["error"]["type"] == "unauthenticated"
    for key in (colleagues, unowned, elsewhere):
        assert _bearer(key).get("/api/v1/whoami").status_code == 200
    assert not Membership.objects.filter(user=member, organization=org).exists()


def test_demoting_an_admin_caps_their_keys_to_the_new_role(org, admin, member):
    _, admin_key = _key_of(admin, org, Role.ADMIN)
    _key_of(admin, org, Role.VIEWER)
    other_admin = MembershipFactory(user=UserFactory(), organization=org, role=Role.ADMIN).user
    _, other_admins_key = _key_of(other_admin, org, Role.ADMIN)
    _, members_key = _key_of(member, org, Role.MEMBER)
    assert _post_job(admin_key).status_code == 201

    assert (
        services.membership_change_role(membership=_membership(admin, org), role=Role.VIEWER) == 1
    )

    refused = _post_job(admin_key)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_denied"
    assert _bearer(admin_key).get("/api/v1/compute/jobs").status_code == 200
    assert _bearer(admin_key).get("/api/v1/whoami").status_code == 200
    assert _membership(admin, org).role == Role.VIEWER
    viewer_key = ApiKey.objects.get(created_by=admin, name=f"{admin.username}-viewer-key")
    assert viewer_key.role == Role.VIEWER
    assert ApiKey.objects.get(created_by=other_admin).role == Role.ADMIN
    assert _post_job(other_admins_key).status_code == 201
    assert _post_job(members_key).status_code == 201
    assert Job.objects.count() == 3


def test_a_demotion_caps_only_keys_above_the_new_role_and_a_promotion_restores_none(org, admin):
    strong, _ = _key_of(admin, org, Role.ADMIN)
    weak, _ = _key_of(admin, org, Role.VIEWER)
    membership = _membership(admin, org)
    assert services.membership_change_role(membership=membership, role=Role.MEMBER) == 1
    strong.refresh_from_db()
    weak.refresh_from_db()
    assert (strong.role, weak.role) == (Role.MEMBER, Role.VIEWER)
    assert services.membership_change_role(membership=membership, role=Role.OWNER) == 0
    strong.refresh_from_db()
    assert strong.role == Role.MEMBER


def test_a_removed_member_loses_keys_made_on_the_settings_page(client_for, admin, org):
    client = client_for(admin)
    page = client.post(f"/o/{org.slug}/settings/", {"name": "ci", "role": Role.ADMIN})
    body = page.content.decode()
    start = body.index('<code class="secret">') + len('<code class="secret">')
    full_key = body[start : body.index("</code>", start)]
    assert _bearer(full_key).get("/api/v1/whoami").status_code == 200
    services.membership_remove(membership=_membership(admin, org))
    assert _bearer(full_key).get("/api/v1/whoami").status_code == 401


# -- the Django admin ---------------------------------------------------------------------


def test_deleting_a_membership_in_the_admin_revokes_its_keys(operator_client, org, member, admin):
    _, theirs = _key_of(member, org, Role.MEMBER)
    _, colleagues = _key_of(admin, org, Role.ADMIN)
    membership = _membership(member, org)
    response = operator_client.post(
        f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert _bearer(theirs).get("/api/v1/whoami").status_code == 401
    assert _bearer(colleagues).get("/api/v1/whoami").status_code == 200


def test_the_admins_bulk_delete_action_revokes_keys(operator_client, org, member, viewer):
    _, members_key = _key_of(member, org, Role.MEMBER)
    _, viewers_key = _key_of(viewer, org, Role.VIEWER)
    chosen = [_membership(member, org).pk, _membership(viewer, org).pk]
    response = operator_client.post(
        "/admin/accounts/membership/",
        {"action": "delete_selected", "_selected_action": chosen, "post": "yes"},
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(pk__in=chosen).exists()
    for key in (members_key, viewers_key):
        assert _bearer(key).get("/api/v1/whoami").status_code == 401


def test_lowering_a_role_in_the_admin_caps_keys(operator_client, org, admin):
    _, admin_key = _key_of(admin, org, Role.ADMIN)
    membership = _membership(admin, org)
    response = operator_client.post(
        f"/admin/accounts/membership/{membership.pk}/change/",
        {
            "role": Role.VIEWER,
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _membership(admin, org).role == Role.VIEWER
    assert ApiKey.objects.get(created_by=admin).role == Role.VIEWER
    assert _post_job(admin_key).status_code == 403


def test_the_admin_cannot_move_a_membership_to_another_user(operator_client, org, member):
    membership = _membership(member, org)
    body = operator_client.get(f"/admin/accounts/membership/{membership.pk}/change/")
    assert body.status_code == 200
    assert 'name="user"' not in body.content.decode()
    assert 'name="organization"' not in body.content.decode()


def _org_form(org, rows: list[dict]) -> dict:
    data = {
        "name": org.name,
        "slug": org.slug,
        "kind": org.kind,
        "compute_enabled": "on",
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
        "memberships-TOTAL_FORMS": str(len(rows)),
        "memberships-INITIAL_FORMS": str(len(rows)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        for field, value in row.items():
            data[f"memberships-{i}-{field}"] = value
    return data


def _row(membership: Membership, **changes) -> dict:
    row = {
        "id": str(membership.pk),
        "organization": str(membership.organization_id),
        "user": str(membership.user_id),
        "role": membership.role,
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
    }
    row.update(changes)
    return row


def test_the_organizations_membership_inline_revokes_and_caps(
    operator_client, org, member, admin, viewer
):
    _, members_key = _key_of(member, org, Role.MEMBER)
    _, admins_key = _key_of(admin, org, Role.ADMIN)
    _, viewers_key = _key_of(viewer, org, Role.VIEWER)
    rows = [
        _row(m, **changes)
        for m, changes in (
            (_membership(member, org), {"DELETE": "on"}),
            (_membership(admin, org), {"role": Role.MEMBER}),
            (_membership(viewer, org), {}),
        )
    ]
    response = operator_client.post(
        f"/admin/accounts/organization/{org.pk}/change/", _org_form(org, rows)
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert _bearer(members_key).get("/api/v1/whoami").status_code == 401
    assert ApiKey.objects.get(created_by=admin).role == Role.MEMBER
    assert _membership(admin, org).role == Role.MEMBER
    assert _bearer(viewers_key).get("/api/v1/whoami").status_code == 200
    assert _bearer(admins_key).get("/api/v1/whoami").status_code == 200


def test_the_inline_cannot_hand_a_membership_to_another_user(operator_client, org, member):
    _, members_key = _key_of(member, org, Role.MEMBER)
    stranger = UserFactory()
    rows = [_row(_membership(member, org), user=str(stranger.pk))]
    response = operator_client.post(
        f"/admin/accounts/organization/{org.pk}/change/", _org_form(org, rows)
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert _membership(member, org).user == member
    assert not Membership.objects.filter(user=stranger).exists()
    assert _bearer(members_key).get("/api/v1/whoami").status_code == 200


def test_deleting_a_user_in_the_admin_revokes_their_keys(operator_client, org, member):
    key, full_key = _key_of(member, org, Role.MEMBER)
    response = operator_client.post(f"/admin/accounts/user/{member.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not type(member).objects.filter(pk=member.pk).exists()
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert _bearer(full_key).get("/api/v1/whoami").status_code == 401
