"""What lies in the database and what the crypto module does with SECRETS_KEYS."""

import pytest
from cryptography.fernet import Fernet, MultiFernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import override_settings

from apps.core import crypto
from apps.core.crypto import SecretUndecryptable, decrypt_data, encrypt_data

pytestmark = pytest.mark.django_db


def _raw_row(secret_pk: int) -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ciphertext, keys::text FROM secrets_secret WHERE id = %s", [secret_pk]
        )
        return cursor.fetchone()


def test_the_ciphertext_column_holds_no_plaintext_and_decrypts_back(secret):
    ciphertext, keys = _raw_row(secret.pk)
    assert "hf_topsecret" not in ciphertext
    assert "xyz" not in ciphertext
    assert keys == '["EXTRA", "HF_TOKEN"]'
    assert decrypt_data(ciphertext) == {"HF_TOKEN": "hf_topsecret", "EXTRA": "xyz"}


def test_no_column_of_the_row_holds_a_value(secret):
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM secrets_secret WHERE id = %s", [secret.pk])
        row = cursor.fetchone()
    assert not any("hf_topsecret" in str(column) for column in row)


def test_encrypting_twice_gives_different_tokens_for_the_same_data():
    assert encrypt_data({"A": "b"}) != encrypt_data({"A": "b"})


def test_the_cached_multifernet_follows_changed_settings():
    new_key = Fernet.generate_key().decode()
    token = encrypt_data({"A": "b"})
    with override_settings(SECRETS_KEYS=[new_key]):
        new_token = encrypt_data({"A": "b"})
        assert Fernet(new_key).decrypt(new_token.encode()) == b'{"A":"b"}'
        with pytest.raises(SecretUndecryptable):
            decrypt_data(token)
    assert decrypt_data(token) == {"A": "b"}
    with pytest.raises(SecretUndecryptable):
        decrypt_data(new_token)


@pytest.mark.parametrize("keys", [["not-a-fernet-key"], [Fernet.generate_key().decode(), "short"]])
def test_an_invalid_key_is_a_clear_improperly_configured(keys):
    with override_settings(SECRETS_KEYS=keys), pytest.raises(ImproperlyConfigured) as raised:
        encrypt_data({"A": "b"})
    message = str(raised.value)
    assert f"SECRETS_KEYS entry {len(keys)} of {len(keys)} is not a valid Fernet key" in message
    assert keys[-1] not in message


def test_no_keys_at_all_is_improperly_configured():
    with override_settings(SECRETS_KEYS=[]), pytest.raises(ImproperlyConfigured):
        crypto.multi_fernet()


def test_the_newest_key_encrypts_and_older_ones_still_decrypt():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(SECRETS_KEYS=[old]):
        old_token = encrypt_data({"A": "old"})
    with override_settings(SECRETS_KEYS=[new, old]):
        assert decrypt_data(old_token) == {"A": "old"}
        new_token = encrypt_data({"A": "new"})
    assert MultiFernet([Fernet(new)]).decrypt(new_token.encode()) == b'{"A":"new"}'
