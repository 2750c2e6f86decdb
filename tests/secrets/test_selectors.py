import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.errors import InvalidRequest
from apps.secrets import services
from apps.secrets.selectors import (
    resolvable_secret_values,
    resolve_secret_env,
    validate_secret_env,
)


def _ref(secret, key: str = "HF_TOKEN") -> dict:
    return {"secret_id": secret.public_id, "key": key}


@pytest.mark.django_db
def test_a_valid_secret_env_passes_and_resolves_to_values(org, secret, make_secret):
    second = make_secret(org, "second", {"WANDB_API_KEY": "wb_123"})
    secret_env = {
        "HF_TOKEN": _ref(secret),
        "ALSO": _ref(secret, "EXTRA"),
        "WANDB_API_KEY": _ref(second, "WANDB_API_KEY"),
    }
    assert validate_secret_env(organization=org, secret_env=secret_env) is None
    with CaptureQueriesContext(connection) as queries:
        resolved = resolve_secret_env(organization=org, secret_env=secret_env)
    assert resolved == {"HF_TOKEN": "hf_topsecret", "ALSO": "xyz", "WANDB_API_KEY": "wb_123"}
    assert len(queries) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("secret_env", [{}, None])
def test_an_empty_secret_env_needs_no_query(org, secret_env):
    with CaptureQueriesContext(connection) as queries:
        validate_secret_env(organization=org, secret_env=secret_env)
        assert resolve_secret_env(organization=org, secret_env=secret_env) == {}
    assert len(queries) == 0


def _both_raise(org, secret_env) -> list[str]:
    params = []
    for check in (validate_secret_env, resolve_secret_env):
        with pytest.raises(InvalidRequest) as raised:
            check(organization=org, secret_env=secret_env)
        assert raised.value.status_code == 400
        params.append(raised.value.param)
    return params


@pytest.mark.django_db
def test_an_unknown_secret_id_names_the_env_var(org, secret):
    secret_env = {"HF_TOKEN": _ref(secret), "OTHER": {"secret_id": "sec_nope", "key": "HF_TOKEN"}}
    assert _both_raise(org, secret_env) == ["container.secret_env.OTHER"] * 2


@pytest.mark.django_db
def test_another_orgs_secret_counts_as_not_existing(org, other_secret):
    assert (
        _both_raise(org, {"HF_TOKEN": _ref(other_secret)}) == ["container.secret_env.HF_TOKEN"] * 2
    )


@pytest.mark.django_db
def test_a_key_the_secret_lacks_names_the_env_var(org, secret):
    assert (
        _both_raise(org, {"MY_TOKEN": _ref(secret, "NOPE")})
        == ["container.secret_env.MY_TOKEN"] * 2
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("secret_env", "param"),
    [
        (["HF_TOKEN"], "container.secret_env"),
        ("HF_TOKEN=sec_x", "container.secret_env"),
        ({"HF_TOKEN": "sec_x"}, "container.secret_env.HF_TOKEN"),
        ({"HF_TOKEN": {"secret_id": "sec_x"}}, "container.secret_env.HF_TOKEN"),
        ({"HF_TOKEN": {"secret_id": 1, "key": "K"}}, "container.secret_env.HF_TOKEN"),
        ({"HF_TOKEN": {"secret_id": "s", "key": "K", "x": 1}}, "container.secret_env.HF_TOKEN"),
        ({"1BAD": {"secret_id": "s", "key": "K"}}, "container.secret_env.1BAD"),
    ],
)
def test_a_malformed_secret_env_is_refused_before_any_query(org, secret_env, param):
    with CaptureQueriesContext(connection) as queries:
        assert _both_raise(org, secret_env) == [param] * 2
    assert len(queries) == 0


@pytest.mark.django_db
def test_resolvable_values_skip_each_missing_entry_on_its_own(org, secret, make_secret):
    second = make_secret(org, "second", {"WANDB_API_KEY": "wb_123"})
    gone = make_secret(org, "gone", {"OLD": "old_value"})
    secret_env = {
        "HF_TOKEN": _ref(secret),
        "SAME": _ref(secret),
        "NO_KEY": _ref(secret, "NOPE"),
        "GONE": _ref(gone, "OLD"),
        "NEVER": {"secret_id": "sec_nope", "key": "K"},
        "WANDB_API_KEY": _ref(second, "WANDB_API_KEY"),
    }
    services.secret_delete(secret=gone)
    with CaptureQueriesContext(connection) as queries:
        values = resolvable_secret_values(organization=org, secret_env=secret_env)
    assert values == ["hf_topsecret", "wb_123"]
    assert len(queries) == 1


@pytest.mark.django_db
def test_resolvable_values_skip_a_secret_the_keys_no_longer_open(org, secret, make_secret):
    second = make_secret(org, "second", {"WANDB_API_KEY": "wb_123"})
    type(secret).objects.filter(pk=secret.pk).update(ciphertext="gAAAAAnot-a-token")
    secret_env = {"HF_TOKEN": _ref(secret), "WANDB_API_KEY": _ref(second, "WANDB_API_KEY")}
    assert resolvable_secret_values(organization=org, secret_env=secret_env) == ["wb_123"]


@pytest.mark.django_db
@pytest.mark.parametrize("secret_env", [None, {}, ["HF_TOKEN"], {"1BAD": {"secret_id": "s"}}])
def test_resolvable_values_of_nothing_or_nonsense_are_none(org, secret_env):
    assert resolvable_secret_values(organization=org, secret_env=secret_env) == []
