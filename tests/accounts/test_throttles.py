"""Sign-in and API throttles: 429 with Retry-After past the limit, for that user, address or
key only."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.accounts import services as account_services
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _sign_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        "/accounts/login/",
        {"username": username, "password": password},
        REMOTE_ADDR=address,
    )


def test_repeated_wrong_passwords_lock_the_user_out_even_with_the_right_one(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_USER = 5
    user = UserFactory(username="ada")
    user.set_password("right-password")
    user.save()
    client = Client()

    answers = [_sign_in(client, "ada", "wrong").status_code for _ in range(5)]
    locked = _sign_in(client, "ADA", "right-password")

    assert answers == [200] * 5  # the form again, with its error
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= settings.SIGN_IN_WINDOW_S
    assert b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session
    other = UserFactory(username="grace")
    other.set_password("her-password")
    other.save()
    assert _sign_in(Client(), "grace", "her-password").status_code == 302  # others sign in


def test_many_failures_from_one_address_lock_that_address_out(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS = 4
    for n in range(4):
        assert _sign_in(Client(), f"nobody-{n}", "x", address="10.9.9.9").status_code == 200
    user = UserFactory(username="lin")
    user.set_password("lin-password")
    user.save()

    assert _sign_in(Client(), "lin", "lin-password", address="10.9.9.9").status_code == 429
    assert _sign_in(Client(), "lin", "lin-password", address="10.1.1.1").status_code == 302


def test_a_successful_sign_in_clears_the_users_failures(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_USER = 3
    user = UserFactory(username="kim")
    user.set_password("kim-password")
    user.save()
    for _ in range(2):
        _sign_in(Client(), "kim", "wrong")
    assert _sign_in(Client(), "kim", "kim-password").status_code == 302

    for _ in range(2):
        assert _sign_in(Client(), "kim", "wrong").status_code == 200
    assert _sign_in(Client(), "kim", "kim-password").status_code == 302


def test_an_api_key_past_its_rate_gets_429_with_retry_after(org, settings):
    settings.API_REQUESTS_PER_MINUTE = 3
    _, key = account_services.api_key_create(organization=org, name="busy")
    _, other_key = account_services.api_key_create(organization=org, name="calm")
    busy = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    codes = [busy.get("/api/v1/whoami").status_code for _ in range(3)]
    refused = busy.get("/api/v1/whoami")

    assert codes == [200, 200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limited"
    assert 0 < int(refused["Retry-After"]) <= 60
    calm = Client(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    assert calm.get("/api/v1/whoami").status_code == 200
