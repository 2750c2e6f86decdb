import hashlib

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from apps.accounts import services
from apps.accounts.models import ApiKey, Role
from apps.core.api_errors import exception_handler
from apps.core.errors import InvalidRequest

pytestmark = pytest.mark.django_db


def _create_key_on_page(client, org, name="ci", role=Role.MEMBER):
    return client.post(f"/o/{org.slug}/settings/", {"name": name, "role": role})


def _bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _shown_key(response) -> str:
    body = response.content.decode()
    start = body.index('<code class="secret">') + len('<code class="secret">')
    return body[start : body.index("</code>", start)]


def test_it_shows_a_new_key_once_and_stores_only_its_hash(client_for, admin, org):
    client = client_for(admin)
    response = _create_key_on_page(client, org)
    assert response.status_code == 200
    full_key = _shown_key(response)
    key = ApiKey.objects.get(organization=org)
    assert full_key.startswith(key.prefix + "_")
    assert key.hashed_key == hashlib.sha256(full_key.encode()).hexdigest()
    secret_part = full_key.removeprefix(key.prefix + "_")
    stored = [str(v) for v in ApiKey.objects.filter(pk=key.pk).values().get().values()]
    assert not any(secret_part in value for value in stored)

    again = client.get(f"/o/{org.slug}/settings/")
    assert key.prefix in again.content.decode()
    assert secret_part not in again.content.decode()


def test_a_second_active_key_of_the_same_name_is_refused_and_a_revoked_ones_name_is_free(
    client_for, admin, org
):
    client = client_for(admin)
    _create_key_on_page(client, org, name="ci")
    refused = _create_key_on_page(client, org, name=" CI ")
    assert refused.status_code == 400
    body = refused.content.decode()
    error = body.split('id="id_name_error">')[1].split("</ul>")[0]  # the name field's
    assert "An active key is already named &#x27;CI&#x27;" in error
    assert '<code class="secret">' not in refused.content.decode()
    assert ApiKey.objects.filter(organization=org).count() == 1

    key = ApiKey.objects.get(organization=org)
    client.post(f"/o/{org.slug}/settings/keys/{key.pk}/revoke/")
    assert '<code class="secret">' in _create_key_on_page(client, org, name="ci").content.decode()
    assert ApiKey.objects.filter(organization=org, name="ci").count() == 2


def test_it_authenticates_with_the_key_as_bearer_and_records_use(client_for, admin, org):
    full_key = _shown_key(_create_key_on_page(client_for(admin), org))
    response = _bearer(full_key).get("/api/v1/whoami")
    assert response.status_code == 200
    assert response.json()["organization"]["slug"] == org.slug
    assert ApiKey.objects.get(organization=org).last_used_at is not None


def test_a_revoked_key_stops_working(client_for, admin, org):
    client = client_for(admin)
    full_key = _shown_key(_create_key_on_page(client, org))
    assert _bearer(full_key).get("/api/v1/whoami").status_code == 200
    key = ApiKey.objects.get(organization=org)

    response = client.post(f"/o/{org.slug}/settings/keys/{key.pk}/revoke/")
    assert response.status_code == 302

    denied = _bearer(full_key).get("/api/v1/whoami")
    assert denied.status_code == 401
    assert denied.json() == {
        "error": {"type": "unauthenticated", "message": "Invalid API key.", "param": None}
    }


@pytest.mark.parametrize(
    "header",
    ["Bearer ty_000000000000_notakey", "Bearer garbage", "Bearer "],
)
def test_a_wrong_key_is_401_with_the_error_body(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_right_prefix_with_a_wrong_secret_is_rejected(api_client_for, org):
    api_client_for(org)
    key = ApiKey.objects.get(organization=org)
    response = _bearer(f"{key.prefix}_wrong-secret").get("/api/v1/whoami")
    assert response.status_code == 401


def test_no_credentials_is_401_unauthenticated(db):
    response = APIClient().get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"


def test_a_member_cannot_create_or_revoke_keys(client_for, member, admin, org, api_client_for):
    client = client_for(member)
    assert _create_key_on_page(client, org).status_code == 403
    assert not ApiKey.objects.exists()

    api_client_for(org)
    key = ApiKey.objects.get()
    assert client.post(f"/o/{org.slug}/settings/keys/{key.pk}/revoke/").status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None


def test_an_admin_cannot_mint_an_owner_key(client_for, admin, org):
    response = _create_key_on_page(client_for(admin), org, role=Role.OWNER)
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_revoking_another_orgs_key_is_404(client_for, admin, org, other_org, api_client_for):
    api_client_for(other_org)
    foreign = ApiKey.objects.get(organization=other_org)
    response = client_for(admin).post(f"/o/{org.slug}/settings/keys/{foreign.pk}/revoke/")
    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.revoked_at is None


def test_the_command_prints_a_working_key_alone_on_its_last_line(org, capsys):
    call_command("create_api_key", "--org", org.slug, "--name", "deploy")
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert _bearer(last_line).get("/api/v1/whoami").json()["api_key"]["name"] == "deploy"


def test_the_service_refuses_a_taken_name_as_a_400_on_name(org):
    services.api_key_create(organization=org, name="deploy")

    with pytest.raises(InvalidRequest) as refused:
        services.api_key_create(organization=org, name="Deploy ", role=Role.ADMIN)

    assert (refused.value.status_code, refused.value.error_type) == (400, "invalid_request")
    assert refused.value.param == "name"
    body = exception_handler(refused.value, {}).data
    assert body["error"]["type"] == "invalid_request" and body["error"]["param"] == "name"
    assert list(ApiKey.objects.values_list("name", "role")) == [("deploy", Role.MEMBER)]


def test_another_organization_may_use_the_same_name(org, other_org):
    services.api_key_create(organization=org, name="ci")
    services.api_key_create(organization=other_org, name="ci")

    assert ApiKey.objects.filter(name="ci").count() == 2


def test_the_command_names_keys_cli_then_cli_2_and_refuses_a_taken_name(org, capsys):
    call_command("create_api_key", "--org", org.slug)
    call_command("create_api_key", "--org", org.slug)
    assert sorted(ApiKey.objects.values_list("name", flat=True)) == ["cli", "cli-2"]
    assert "('cli-2', role member)" in capsys.readouterr().out

    with pytest.raises(CommandError, match="already named 'CLI'"):
        call_command("create_api_key", "--org", org.slug, "--name", "CLI")
    assert ApiKey.objects.count() == 2


def test_the_command_refuses_an_unknown_org(db):
    with pytest.raises(CommandError, match="No organization"):
        call_command("create_api_key", "--org", "nope")
