import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.crypto import decrypt_data
from apps.core.errors import Conflict, InvalidRequest
from apps.secrets import services
from apps.secrets.models import Secret

pytestmark = pytest.mark.django_db


def test_create_stores_sorted_keys_and_encrypted_values(org):
    secret = services.secret_create(organization=org, name="a.b-c_1", data={"Z": "1", "_A": ""})
    secret.refresh_from_db()
    assert secret.keys == ["Z", "_A"]
    assert decrypt_data(secret.ciphertext) == {"Z": "1", "_A": ""}
    assert secret.public_id.startswith("sec_")


def test_a_duplicate_name_is_caught_by_the_constraint_and_the_transaction_stays_usable(org, secret):
    with CaptureQueriesContext(connection) as queries, pytest.raises(Conflict) as raised:
        services.secret_create(organization=org, name=secret.name, data={"A": "b"})
    assert raised.value.param == "name"
    assert raised.value.status_code == 409
    # The INSERT itself was tried: the constraint, not a pre-check, decided.
    assert any(q["sql"].startswith('INSERT INTO "secrets_secret"') for q in queries)
    assert Secret.objects.count() == 1


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ({"A": "x" * 65_537}, "data.A"),
        ({"A": "nul\x00byte"}, "data.A"),
        ({f"K{n}": "v" for n in range(101)}, "data"),
        ({"K" * 129: "v"}, "data." + "K" * 129),
    ],
)
def test_oversized_or_unusable_data_is_refused(org, data, param):
    with pytest.raises(InvalidRequest) as raised:
        services.secret_create(organization=org, name="n", data=data)
    assert raised.value.param == param
    assert not Secret.objects.exists()


def test_delete_removes_only_that_secret(org, secret, other_secret):
    services.secret_delete(secret=secret)
    assert list(Secret.objects.all()) == [other_secret]
