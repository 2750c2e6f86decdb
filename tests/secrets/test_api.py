import pytest

from apps.accounts.models import Role
from apps.core.crypto import decrypt_data
from apps.secrets.models import Secret

pytestmark = pytest.mark.django_db

URL = "/api/v1/compute/secrets"


def _snapshot(org):
    return list(
        Secret.objects.for_org(org)
        .order_by("id")
        .values("name", "keys", "ciphertext", "updated_at")
    )


def test_create_returns_id_name_and_sorted_keys_but_no_value(api_client_for, org):
    response = api_client_for(org, role=Role.ADMIN).post(
        URL,
        {"name": "artifact-repository", "data": {"HF_TOKEN": "hf_abc123", "A_KEY": "zz_987"}},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "name", "keys", "created_at", "updated_at"}
    assert body["id"].startswith("sec_") and len(body["id"]) == 20
    assert body["name"] == "artifact-repository"
    assert body["keys"] == ["A_KEY", "HF_TOKEN"]
    assert b"hf_abc123" not in response.content
    assert b"zz_987" not in response.content
    secret = Secret.objects.get(public_id=body["id"])
    assert secret.organization == org
    assert decrypt_data(secret.ciphertext) == {"HF_TOKEN": "hf_abc123", "A_KEY": "zz_987"}


def test_list_and_get_show_key_names_but_never_values(api_client_for, org, secret):
    client = api_client_for(org, role=Role.VIEWER)
    listed = client.get(URL)
    got = client.get(f"{URL}/{secret.public_id}")
    assert listed.status_code == 200 and got.status_code == 200
    expected = {
        "id": secret.public_id,
        "name": "artifact-repository",
        "keys": ["EXTRA", "HF_TOKEN"],
        "created_at": got.json()["created_at"],
        "updated_at": got.json()["updated_at"],
    }
    assert got.json() == expected
    assert listed.json() == {"data": [expected], "next_cursor": None, "total": 1}
    for response in (listed, got):
        assert b"hf_topsecret" not in response.content
        assert b"xyz" not in response.content
        assert b"ciphertext" not in response.content


def test_list_shows_only_the_callers_secrets(api_client_for, org, secret, other_secret):
    body = api_client_for(org).get(URL).json()
    assert [s["id"] for s in body["data"]] == [secret.public_id]
    assert body["total"] == 1


def test_put_replaces_all_values_and_the_key_list(api_client_for, org, secret):
    before = secret.updated_at
    response = api_client_for(org, role=Role.ADMIN).put(
        f"{URL}/{secret.public_id}", {"data": {"NEW_TOKEN": "n3w"}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["keys"] == ["NEW_TOKEN"]
    assert b"n3w" not in response.content
    secret.refresh_from_db()
    assert secret.keys == ["NEW_TOKEN"]
    assert decrypt_data(secret.ciphertext) == {"NEW_TOKEN": "n3w"}
    assert secret.updated_at > before
    assert secret.name == "artifact-repository"


def test_delete_removes_the_secret(api_client_for, org, secret, other_secret):
    response = api_client_for(org, role=Role.ADMIN).delete(f"{URL}/{secret.public_id}")
    assert response.status_code == 204
    assert response.content == b""
    assert list(Secret.objects.values_list("public_id", flat=True)) == [other_secret.public_id]
    assert api_client_for(org).get(f"{URL}/{secret.public_id}").status_code == 404


@pytest.mark.parametrize(
    ("method", "body"),
    [("get", None), ("put", {"data": {"HF_TOKEN": "stolen"}}), ("delete", None)],
)
def test_another_orgs_secret_is_404_not_found_and_untouched(
    api_client_for, org, other_org, other_secret, method, body
):
    before = _snapshot(other_org)
    response = getattr(api_client_for(org, role=Role.ADMIN), method)(
        f"{URL}/{other_secret.public_id}", body, format="json"
    )
    assert response.status_code == 404
    assert response.json() == {
        "error": {"type": "not_found", "message": "Not found.", "param": None}
    }
    assert _snapshot(other_org) == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "", {"name": "new", "data": {"A": "b"}}),
        ("put", "/{id}", {"data": {"A": "b"}}),
        ("delete", "/{id}", None),
    ],
)
def test_a_viewer_gets_permission_denied_and_nothing_changes(
    api_client_for, org, secret, method, path, body
):
    before = _snapshot(org)
    client = api_client_for(org, role=Role.VIEWER)
    response = getattr(client, method)(URL + path.format(id=secret.public_id), body, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_denied"
    assert _snapshot(org) == before


def test_a_duplicate_name_is_409_conflict_and_keeps_the_first(api_client_for, org, secret):
    before = _snapshot(org)
    response = api_client_for(org, role=Role.ADMIN).post(
        URL, {"name": "artifact-repository", "data": {"OTHER": "v"}}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "conflict"
    assert response.json()["error"]["param"] == "name"
    assert _snapshot(org) == before


def test_the_same_name_in_another_org_is_fine(api_client_for, org, other_org, other_secret):
    response = api_client_for(org, role=Role.ADMIN).post(
        URL, {"name": other_secret.name, "data": {"A": "b"}}, format="json"
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"data": {"A": "b"}}, "name"),
        ({"name": "", "data": {"A": "b"}}, "name"),
        ({"name": "has space", "data": {"A": "b"}}, "name"),
        ({"name": "x" * 101, "data": {"A": "b"}}, "name"),
        ({"name": "ok"}, "data"),
        ({"name": "ok", "data": {}}, "data"),
        ({"name": "ok", "data": ["A"]}, "data"),
        ({"name": "ok", "data": "A=b"}, "data"),
        ({"name": "ok", "data": {"1BAD": "v"}}, "data.1BAD"),
        ({"name": "ok", "data": {"MY-KEY": "v"}}, "data.MY-KEY"),
        ({"name": "ok", "data": {"GOOD": "v", "MY_KEY": 5}}, "data.MY_KEY"),
        ({"name": "ok", "data": {"MY_KEY": None}}, "data.MY_KEY"),
        ({"name": "ok", "data": {"MY_KEY": {"nested": "v"}}}, "data.MY_KEY"),
        ({"name": "ok", "data": {"MY_KEY": True}}, "data.MY_KEY"),
    ],
)
def test_bad_create_bodies_are_invalid_request_naming_the_param(api_client_for, org, body, param):
    response = api_client_for(org, role=Role.ADMIN).post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == param
    assert not Secret.objects.exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [({}, "data"), ({"data": {}}, "data"), ({"data": {"OK": "v", "BAD": 1}}, "data.BAD")],
)
def test_a_bad_replace_is_invalid_request_and_keeps_the_old_values(
    api_client_for, org, secret, body, param
):
    before = _snapshot(org)
    response = api_client_for(org, role=Role.ADMIN).put(
        f"{URL}/{secret.public_id}", body, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert _snapshot(org) == before


@pytest.mark.parametrize("method", ["get", "post"])
def test_an_org_without_compute_gets_tenant_disabled(api_client_for, org, method):
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])
    response = getattr(api_client_for(org, role=Role.ADMIN), method)(
        URL, {"name": "x", "data": {"A": "b"}}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "tenant_disabled"
    assert not Secret.objects.exists()


def test_without_a_key_it_is_401_unauthenticated(client, org):
    response = client.get(URL)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"


def test_a_signed_in_admin_creates_and_signed_in_members_and_viewers_cannot(
    client_for, admin, member, viewer, org
):
    created = client_for(admin).post(
        URL, {"name": "web", "data": {"A": "b"}}, content_type="application/json"
    )
    assert created.status_code == 201
    for user in (member, viewer):
        refused = client_for(user).delete(f"{URL}/{created.json()['id']}")
        assert refused.status_code == 403
        assert refused.json()["error"]["type"] == "permission_denied"
    assert list(Secret.objects.values_list("name", flat=True)) == ["web"]


WRITES = [
    ("post", "", {"name": "new", "data": {"A": "b"}}),
    ("put", "/{id}", {"data": {"HF_TOKEN": "replaced"}}),
    ("delete", "/{id}", None),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_member_key_may_not_create_replace_or_delete(
    api_client_for, org, secret, method, path, body
):
    before = _snapshot(org)
    client = api_client_for(org, role=Role.MEMBER)
    response = getattr(client, method)(URL + path.format(id=secret.public_id), body, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_denied"
    assert _snapshot(org) == before
    assert decrypt_data(Secret.objects.get(pk=secret.pk).ciphertext)["HF_TOKEN"] == "hf_topsecret"


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_signed_in_member_may_not_create_replace_or_delete(
    client_for, member, org, secret, method, path, body
):
    before = _snapshot(org)
    response = getattr(client_for(member), method)(
        URL + path.format(id=secret.public_id), body, content_type="application/json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_denied"
    assert _snapshot(org) == before


def test_a_member_still_lists_and_reads_secrets_without_values(api_client_for, org, secret):
    client = api_client_for(org)
    listed = client.get(URL)
    got = client.get(f"{URL}/{secret.public_id}")
    assert listed.status_code == 200 and got.status_code == 200
    assert [s["id"] for s in listed.json()["data"]] == [secret.public_id]
    assert got.json()["keys"] == ["EXTRA", "HF_TOKEN"]
    for response in (listed, got):
        assert b"hf_topsecret" not in response.content


@pytest.mark.parametrize("role", [Role.ADMIN, Role.OWNER])
def test_admins_and_owners_replace_and_delete(api_client_for, org, secret, role):
    client = api_client_for(org, role=role)
    replaced = client.put(f"{URL}/{secret.public_id}", {"data": {"NEW": "v"}}, format="json")
    assert replaced.status_code == 200
    assert decrypt_data(Secret.objects.get(pk=secret.pk).ciphertext) == {"NEW": "v"}
    assert client.delete(f"{URL}/{secret.public_id}").status_code == 204
    assert not Secret.objects.filter(pk=secret.pk).exists()
