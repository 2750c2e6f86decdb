"""A provider's credentials are write-only: stored encrypted, handed to its backend, never
in its config or the admin's pages."""

from __future__ import annotations

import pytest

from apps.providers.backends import backend_for
from apps.providers.models import Provider

pytestmark = pytest.mark.django_db
KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-material\n-----END OPENSSH PRIVATE KEY-----\n"
)


def test_credentials_are_encrypted_at_rest_and_reach_the_backend():
    provider = Provider(name="box", kind=Provider.Kind.LOCAL, config={"slots": 1})
    provider.set_credentials({"private_key": KEY})
    provider.save()

    stored = Provider.objects.get(pk=provider.pk)
    assert "secret-key-material" not in stored.credentials_encrypted
    assert stored.credentials() == {"private_key": KEY}
    assert backend_for(stored).credentials == {"private_key": KEY}
    assert "private_key" not in stored.config


def test_no_credentials_is_an_empty_dict():
    provider = Provider.objects.create(name="bare", kind=Provider.Kind.LOCAL)
    assert provider.credentials() == {}
    provider.set_credentials({})
    assert provider.credentials_encrypted == ""


def test_the_admin_never_shows_a_stored_key(client, django_user_model):
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw-12345678")
    provider = Provider(name="box", kind=Provider.Kind.LOCAL)
    provider.set_credentials({"private_key": KEY})
    provider.save()
    client.force_login(operator)

    page = client.get(f"/admin/providers/provider/{provider.pk}/change/")

    assert page.status_code == 200
    assert b"secret-key-material" not in page.content
    assert b"private_key" in page.content  # the write-only field is there, empty
    response = client.post(
        f"/admin/providers/provider/{provider.pk}/change/",
        {
            "name": "box",
            "kind": "local",
            "config": "{}",
            "enabled": "on",
            "private_key": "",
            "offers-TOTAL_FORMS": "0",
            "offers-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    assert Provider.objects.get(pk=provider.pk).credentials() == {"private_key": KEY}  # kept
