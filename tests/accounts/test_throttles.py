"""Sign-in (site and admin) and API throttles: 429 with Retry-After past the limit, for that
(user, address) pair, address or key only; a username is slowed, never locked."""

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


def _user(username: str, password: str, **fields):
    user = UserFactory(username=username, **fields)
    user.set_password(password)
    user.save()
    return user


def test_repeated_wrong_passwords_lock_out_that_address_for_that_user(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 5
    _user("ada", "right-password")
    client = Client()

    answers = [_sign_in(client, "ada", "wrong").status_code for _ in range(5)]
    locked = _sign_in(client, "ADA", "right-password")

    assert answers == [200] * 5  # the form again, with its error
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= settings.SIGN_IN_WINDOW_S
    assert b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session
    _user("grace", "her-password")
    assert _sign_in(Client(), "grace", "her-password").status_code == 302  # others sign in


def test_an_attackers_failures_never_lock_the_user_out_at_another_address(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 5
    _user("bea", "bea-password")
    attacker = Client()
    answers = [
        _sign_in(attacker, "bea", f"guess-{n}", "203.0.113.7").status_code for n in range(12)
    ]

    assert answers == [200] * 5 + [429] * 7  # refused after five, and not counted on
    assert _sign_in(attacker, "bea", "bea-password", "203.0.113.7").status_code == 429
    real = Client()
    signed_in = _sign_in(real, "bea", "bea-password", "198.51.100.20")
    assert signed_in.status_code == 302
    assert real.session["_auth_user_id"]


def test_a_username_under_attack_from_many_addresses_slows_each_to_one_guess(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 5
    settings.SIGN_IN_MAX_FAILURES_PER_USER = 6
    _user("cyd", "cyd-password")
    # The real user signs in once from home, which makes that address known.
    assert _sign_in(Client(), "cyd", "cyd-password", "198.51.100.1").status_code == 302
    for n in range(3):  # three addresses, two guesses each: six failures
        for _ in range(2):
            assert _sign_in(Client(), "cyd", "x", f"203.0.113.{n}").status_code == 200

    # Now each address gets one failure for cyd: the ones that failed are refused ...
    assert _sign_in(Client(), "cyd", "x", "203.0.113.0").status_code == 429
    assert _sign_in(Client(), "cyd", "x", "203.0.113.50").status_code == 200
    assert _sign_in(Client(), "cyd", "x", "203.0.113.50").status_code == 429
    # ... other usernames from those addresses are not ...
    _user("dee", "dee-password")
    assert _sign_in(Client(), "dee", "dee-password", "203.0.113.0").status_code == 302
    # ... and cyd still signs in from a fresh address, and from home after a typo.
    assert _sign_in(Client(), "cyd", "cyd-password", "192.0.2.99").status_code == 302
    assert _sign_in(Client(), "cyd", "typo", "198.51.100.1").status_code == 200
    assert _sign_in(Client(), "cyd", "cyd-password", "198.51.100.1").status_code == 302


def test_many_failures_from_one_address_lock_that_address_out(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS = 4
    for n in range(4):
        assert _sign_in(Client(), f"nobody-{n}", "x", address="10.9.9.9").status_code == 200
    _user("lin", "lin-password")

    assert _sign_in(Client(), "lin", "lin-password", address="10.9.9.9").status_code == 429
    assert _sign_in(Client(), "lin", "lin-password", address="10.1.1.1").status_code == 302


def test_an_ipv6_sprayer_counts_as_one_address_across_its_64(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS = 4
    for n in range(4):
        address = f"2001:db8:1:2::{n + 1:x}"
        assert _sign_in(Client(), f"nobody-{n}", "x", address=address).status_code == 200
    _user("ivo", "ivo-password")

    assert _sign_in(Client(), "ivo", "ivo-password", address="2001:db8:1:2::ff").status_code == 429
    assert _sign_in(Client(), "ivo", "ivo-password", address="2001:db8:1:3::1").status_code == 302


def test_a_successful_sign_in_clears_its_addresses_failures(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 3
    _user("kim", "kim-password")
    for _ in range(2):
        _sign_in(Client(), "kim", "wrong")
    assert _sign_in(Client(), "kim", "kim-password").status_code == 302

    for _ in range(2):
        assert _sign_in(Client(), "kim", "wrong").status_code == 200
    assert _sign_in(Client(), "kim", "kim-password").status_code == 302


def _admin_sign_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def test_the_admin_login_is_throttled_like_the_sites(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 5
    _user("boss", "boss-password", is_staff=True)
    client = Client()

    answers = [_admin_sign_in(client, "boss", f"guess-{n}").status_code for n in range(8)]
    locked = _admin_sign_in(client, "boss", "boss-password")

    assert answers == [200] * 5 + [429] * 3
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= settings.SIGN_IN_WINDOW_S
    assert b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302  # still sent to the login page
    # The same staff user at another address signs in to the admin.
    other = Client()
    signed_in = _admin_sign_in(other, "boss", "boss-password", "10.0.0.2")
    assert signed_in.status_code == 302
    assert signed_in["Location"] == "/admin/"
    assert other.get("/admin/").status_code == 200


def test_the_admin_and_the_site_share_one_count(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 4
    _user("ops", "ops-password", is_staff=True)
    for _ in range(2):
        assert _sign_in(Client(), "ops", "x").status_code == 200
        assert _admin_sign_in(Client(), "ops", "x").status_code == 200

    assert _admin_sign_in(Client(), "ops", "ops-password").status_code == 429
    assert _sign_in(Client(), "ops", "ops-password").status_code == 429


def test_the_admin_login_holds_the_per_address_cap(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_ADDRESS = 3
    _user("chief", "chief-password", is_staff=True)
    for n in range(3):
        assert _admin_sign_in(Client(), f"staff-{n}", "x", "10.7.7.7").status_code == 200

    assert _admin_sign_in(Client(), "chief", "chief-password", "10.7.7.7").status_code == 429
    assert _admin_sign_in(Client(), "chief", "chief-password", "10.7.7.8").status_code == 302


def test_a_non_staff_users_right_password_at_the_admin_counts_as_a_failure(settings):
    settings.SIGN_IN_MAX_FAILURES_PER_PAIR = 2
    _user("pat", "pat-password")
    for _ in range(2):
        answer = _admin_sign_in(Client(), "pat", "pat-password")
        assert answer.status_code == 200
        assert b"staff account" in answer.content

    assert _admin_sign_in(Client(), "pat", "pat-password").status_code == 429
    assert _sign_in(Client(), "pat", "pat-password", "10.0.0.9").status_code == 302


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
