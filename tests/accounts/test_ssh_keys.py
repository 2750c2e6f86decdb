"""Members' SSH keys: the service's rules, the gateway's lookup (`member_key`) and the
"Your SSH keys" section of the settings page."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.accounts import services
from apps.accounts.models import Membership, Role, SshKey
from apps.accounts.ssh_keys import member_key, touch
from apps.core.errors import InvalidRequest, NotFound
from apps.core.ssh_keys import parse_public_key
from tests import sshkeys
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def _add(org, user, line, name=""):
    return services.ssh_key_add(organization=org, user=user, public_key=line, name=name)


# The service


def test_a_key_is_stored_normalised_with_its_comment_as_the_default_name(org, member):
    line = sshkeys.ed25519_line("me@laptop")
    key = _add(org, member, f"  {line}\n")
    parsed = parse_public_key(line)
    assert key.public_key == parsed.line and " me@laptop" not in key.public_key
    assert key.name == "me@laptop"
    assert key.fingerprint == parsed.fingerprint
    assert key.last_used_at is None and key.created_at is not None
    assert _add(org, member, sshkeys.ed25519_line(), name="  work  box ").name == "work box"
    assert _add(org, member, sshkeys.ecdsa_line()).name == "ecdsa-sha2-nistp256"


def test_a_bad_key_is_an_invalid_request_naming_the_field(org, member):
    with pytest.raises(InvalidRequest, match="DSA") as caught:
        _add(org, member, "ssh-dss AAAAB3NzaC1kc3M= x")
    assert caught.value.param == "public_key"
    with pytest.raises(InvalidRequest, match="at most 100") as caught:
        _add(org, member, sshkeys.ed25519_line(), name="x" * 101)
    assert caught.value.param == "name"
    assert not SshKey.objects.exists()


def test_a_key_names_one_person_per_organization(org, other_org, member, admin):
    line = sshkeys.ed25519_line("shared")
    _add(org, member, line)
    with pytest.raises(InvalidRequest, match="already registered this key here, as 'shared'"):
        _add(org, member, line + " again")
    with pytest.raises(InvalidRequest, match="Another member"):
        _add(org, admin, line)
    # The same person may use the same key in another of their organizations.
    Membership.objects.create(user=member, organization=other_org, role=Role.MEMBER)
    assert _add(other_org, member, line).organization == other_org


def test_only_members_add_keys_and_only_their_own_are_removed(org, other_org, member, admin):
    with pytest.raises(NotFound):
        _add(other_org, member, sshkeys.ed25519_line())
    key = _add(org, member, sshkeys.ed25519_line())
    for user, organization in ((admin, org), (member, other_org)):
        with pytest.raises(NotFound):
            services.ssh_key_remove(organization=organization, user=user, key_id=key.pk)
    services.ssh_key_remove(organization=org, user=member, key_id=key.pk)
    assert not SshKey.objects.exists()


def test_removing_a_membership_deletes_its_keys_in_that_organization_only(org, other_org, member):
    Membership.objects.create(user=member, organization=other_org, role=Role.MEMBER)
    line = sshkeys.ed25519_line()
    _add(org, member, line)
    _add(other_org, member, line)
    services.membership_remove(membership=Membership.objects.get(user=member, organization=org))
    assert list(SshKey.objects.values_list("organization__slug", flat=True)) == ["globex"]


# member_key: what the gateway asks


@pytest.mark.parametrize("role", [Role.MEMBER, Role.ADMIN, Role.OWNER])
def test_a_members_key_lets_them_in_by_blob_or_line(org, role):
    user = MembershipFactory(organization=org, role=role).user
    line = sshkeys.ed25519_line("me@host")
    key = _add(org, user, line)
    for presented in (sshkeys.blob_of(line), line, line.rsplit(" ", 1)[0]):
        found = member_key(org.pk, presented)
        assert found == key and found.user == user


def test_a_viewers_key_is_refused(org, viewer):
    line = sshkeys.ed25519_line()
    _add(org, viewer, line)  # viewers may register keys
    assert member_key(org.pk, sshkeys.blob_of(line)) is None


def test_a_removed_or_deactivated_member_or_another_orgs_key_is_refused(org, other_org, member):
    line = sshkeys.ed25519_line()
    _add(org, member, line)
    assert member_key(other_org.pk, line) is None  # another organization's jobs

    member.is_active = False
    member.save()
    assert member_key(org.pk, line) is None
    member.is_active = True
    member.save()
    assert member_key(org.pk, line) is not None

    # A membership deleted without the service (its keys left behind) still lets nobody in.
    Membership.objects.filter(user=member, organization=org).delete()
    assert SshKey.objects.filter(user=member).exists()
    assert member_key(org.pk, line) is None


def test_a_member_of_both_is_let_into_each_only_with_that_orgs_registration(org, other_org, member):
    Membership.objects.create(user=member, organization=other_org, role=Role.MEMBER)
    line = sshkeys.ed25519_line()
    _add(org, member, line)
    assert member_key(other_org.pk, line) is None
    assert member_key(org.pk, line) is not None


def test_unknown_and_malformed_keys_are_none(org, member):
    _add(org, member, sshkeys.ed25519_line())
    assert member_key(org.pk, sshkeys.ed25519_line()) is None
    assert member_key(org.pk, b"\x00\x00\x00\x0bssh-ed25519") is None
    assert member_key(org.pk, b"") is None
    assert member_key(org.pk, "ssh-dss AAAA") is None


def test_touch_records_the_last_use(org, member):
    key = _add(org, member, sshkeys.ed25519_line())
    touch(key)
    assert key.last_used_at is not None
    assert SshKey.objects.get(pk=key.pk).last_used_at == key.last_used_at


# The settings page

ADD = "/o/acme/settings/ssh-keys/"


def _remove_url(key) -> str:
    return f"/o/{key.organization.slug}/settings/ssh-keys/{key.pk}/remove/"


def test_the_page_lists_only_my_keys_in_this_org(client_for, org, member, admin):
    mine = _add(org, member, sshkeys.ed25519_line("mine@laptop"))
    _add(org, admin, sshkeys.ed25519_line("theirs@laptop"))
    page = client_for(member).get("/o/acme/settings/").content.decode()
    assert 'id="ssh-keys"' in page
    assert "mine@laptop" in page and mine.fingerprint in page
    assert "theirs@laptop" not in page
    assert "never" in page  # last used
    assert "viewers cannot open sessions" not in page


def test_adding_a_key_without_javascript_redirects_back_to_the_section(client_for, org, member):
    client = client_for(member)
    line = sshkeys.ed25519_line("me@laptop")
    response = client.post(ADD, {"public_key": line, "name": ""})
    assert response.status_code == 302
    assert response["Location"] == "/o/acme/settings/#ssh-keys"
    key = SshKey.objects.get(user=member, organization=org)
    assert key.name == "me@laptop"
    assert key.fingerprint in client.get("/o/acme/settings/").content.decode()


def test_adding_with_htmx_answers_the_section_alone(client_for, org, member):
    response = client_for(member).post(
        ADD, {"public_key": sshkeys.ed25519_line(), "name": "laptop"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="card ssh-keys" id="ssh-keys"')
    assert "<html" not in body and "laptop" in body


@pytest.mark.parametrize("htmx", [False, True])
def test_a_bad_key_shows_the_reason_in_the_form(client_for, org, member, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client_for(member).post(
        ADD, {"public_key": sshkeys.rsa_line(1024), "name": ""}, **headers
    )
    assert response.status_code == 200
    assert "1024 bits; at least 2048" in response.content.decode()
    assert not SshKey.objects.exists()


def test_a_key_another_member_registered_is_refused_on_the_page(client_for, org, member, admin):
    line = sshkeys.ed25519_line()
    _add(org, admin, line)
    response = client_for(member).post(ADD, {"public_key": line}, HTTP_HX_REQUEST="true")
    assert "Another member of this organization" in response.content.decode()
    assert SshKey.objects.count() == 1


def test_posting_without_a_csrf_token_is_refused(org, member):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    response = client.post(ADD, {"public_key": sshkeys.ed25519_line()})
    assert response.status_code == 403
    key = _add(org, member, sshkeys.ed25519_line())
    assert client.post(_remove_url(key)).status_code == 403
    assert SshKey.objects.count() == 1


def test_removing_my_key_with_and_without_htmx(client_for, org, member):
    client = client_for(member)
    first = _add(org, member, sshkeys.ed25519_line("first"))
    second = _add(org, member, sshkeys.ed25519_line("second"))
    response = client.post(_remove_url(first))
    assert (response.status_code, response["Location"]) == (302, "/o/acme/settings/#ssh-keys")
    response = client.post(_remove_url(second), HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "No SSH keys yet." in response.content.decode()
    assert not SshKey.objects.exists()
    assert client.get(_remove_url(second)).status_code == 405


def test_another_users_or_another_orgs_key_is_a_404(
    client_for, org, other_org, member, admin, outsider
):
    theirs = _add(org, admin, sshkeys.ed25519_line())
    elsewhere = _add(other_org, outsider, sshkeys.ed25519_line())
    client = client_for(member)
    assert client.post(_remove_url(theirs)).status_code == 404
    # Through my own organization's URL, and through theirs (of which I am no member).
    assert client.post(f"/o/acme/settings/ssh-keys/{elsewhere.pk}/remove/").status_code == 404
    assert client.post(_remove_url(elsewhere)).status_code == 404
    assert client.post("/o/globex/settings/ssh-keys/", {"public_key": "x"}).status_code == 404
    assert SshKey.objects.count() == 2


def test_a_viewer_may_register_keys_and_is_told_they_cannot_open_sessions(client_for, org, viewer):
    client = client_for(viewer)
    page = client.get("/o/acme/settings/").content.decode()
    assert "viewers cannot open sessions" in page
    assert client.post(ADD, {"public_key": sshkeys.ed25519_line()}).status_code == 302
    assert SshKey.objects.filter(user=viewer).count() == 1


def test_the_page_says_when_no_gateway_runs(client_for, org, member, settings):
    settings.SSH_GATEWAY_PORT = 0
    assert "not turned on" in client_for(member).get("/o/acme/settings/").content.decode()
    settings.SSH_GATEWAY_PORT = 2222
    assert "not turned on" not in client_for(member).get("/o/acme/settings/").content.decode()


def test_a_user_without_membership_cannot_reach_the_section(db, org):
    stranger = UserFactory()
    client = Client()
    client.force_login(stranger)
    assert client.post(ADD, {"public_key": sshkeys.ed25519_line()}).status_code == 404
