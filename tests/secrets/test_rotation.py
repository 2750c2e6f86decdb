import json

import pytest
from cryptography.fernet import Fernet, MultiFernet
from django.core.management import call_command
from django.test import override_settings

from apps.core.crypto import decrypt_data
from apps.providers.models import Provider
from apps.secrets import services
from apps.secrets.models import Secret

pytestmark = pytest.mark.django_db

OLD = Fernet.generate_key().decode()
NEW = Fernet.generate_key().decode()


def _only_new_key_decrypts_every_row() -> dict[str, dict]:
    """Every row, decrypted by a MultiFernet that knows only the new key."""
    only_new = MultiFernet([Fernet(NEW)])
    return {
        secret.name: json.loads(only_new.decrypt(secret.ciphertext.encode()))
        for secret in Secret.objects.order_by("name")
    }


@pytest.fixture
def old_secrets(org, other_org, make_secret):
    with override_settings(SECRETS_KEYS=[OLD]):
        made = [
            make_secret(org, "a", {"TOKEN": "one"}),
            make_secret(org, "b", {"TOKEN": "two", "MORE": "three"}),
            make_secret(other_org, "c", {"TOKEN": "four"}),
        ]
    return made


def test_rotation_re_encrypts_every_row_with_the_newest_key(old_secrets):
    before = {s.name: (s.keys, s.updated_at) for s in Secret.objects.all()}
    with override_settings(SECRETS_KEYS=[NEW, OLD]):
        assert services.secrets_rotate(batch_size=2).rotated == 3
    assert _only_new_key_decrypts_every_row() == {
        "a": {"TOKEN": "one"},
        "b": {"TOKEN": "two", "MORE": "three"},
        "c": {"TOKEN": "four"},
    }
    assert {s.name: (s.keys, s.updated_at) for s in Secret.objects.all()} == before


def test_the_command_prints_how_many_it_re_encrypted(old_secrets, capsys):
    with override_settings(SECRETS_KEYS=[NEW, OLD]):
        call_command("rotate_secrets", "--batch-size", "1")
    assert capsys.readouterr().out == (
        "Re-encrypted 3 secrets with the newest key.\n"
        "Re-encrypted the credentials of 0 providers.\n"
    )
    assert len(_only_new_key_decrypts_every_row()) == 3


def test_rotation_with_no_secrets_is_zero(db):
    assert services.secrets_rotate().rotated == 0


def test_rotation_leaves_a_row_no_key_opens_and_lists_it(old_secrets):
    with override_settings(SECRETS_KEYS=[NEW]):
        rotation = services.secrets_rotate()
    assert rotation.rotated == 0
    assert sorted(secret.name for secret in rotation.undecryptable) == ["a", "b", "c"]
    with override_settings(SECRETS_KEYS=[OLD]):
        assert decrypt_data(Secret.objects.get(name="a").ciphertext) == {"TOKEN": "one"}


def test_provider_credentials_are_re_encrypted_with_the_newest_key(db):
    with override_settings(SECRETS_KEYS=[OLD]):
        provider = Provider(name="box", kind=Provider.Kind.SSH)
        provider.set_credentials({"private_key": "key material"})
        provider.save()
        Provider.objects.create(name="keyless", kind=Provider.Kind.SSH)
    with override_settings(SECRETS_KEYS=[NEW, OLD]):
        assert services.provider_credentials_rotate().rotated == 1
    stored = Provider.objects.get(pk=provider.pk).credentials_encrypted
    only_new = MultiFernet([Fernet(NEW)])
    assert json.loads(only_new.decrypt(stored.encode())) == {"private_key": "key material"}
