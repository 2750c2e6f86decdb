import pytest

from apps.secrets.models import Secret
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_admin_shows_names_and_keys_but_no_ciphertext_or_value(superuser_client, secret):
    pages = [
        superuser_client.get("/admin/secrets/secret/"),
        superuser_client.get(f"/admin/secrets/secret/{secret.pk}/change/"),
    ]
    for page in pages:
        assert page.status_code == 200
        html = page.content.decode()
        assert "artifact-repository" in html
        assert "HF_TOKEN" in html
        assert "hf_topsecret" not in html
        assert secret.ciphertext not in html
        assert "ciphertext" not in html.lower()


def test_the_admin_cannot_add_or_edit_secrets(superuser_client, secret):
    assert superuser_client.get("/admin/secrets/secret/add/").status_code == 403
    response = superuser_client.post(
        f"/admin/secrets/secret/{secret.pk}/change/", {"name": "renamed", "keys": '["X"]'}
    )
    assert response.status_code == 403
    assert Secret.objects.get().name == "artifact-repository"


def test_the_admin_can_delete_a_secret(superuser_client, secret):
    response = superuser_client.post(f"/admin/secrets/secret/{secret.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Secret.objects.exists()
