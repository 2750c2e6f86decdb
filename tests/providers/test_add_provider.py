"""`manage.py add_provider` and the providers admin test the connection before they save:
a provider that cannot work is refused with a message that says what to fix, and nothing is
saved; one that works gets an offer per accelerator at the operator's price."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from apps.catalog.models import Offer
from apps.providers.models import Provider
from tests.providers.sshd import keygen

pytestmark = pytest.mark.django_db
FAR_PYTHON = "/usr/bin/python3"


def _ssh_args(sshd, tmp_path, *, host_key: str | None = None, key_file=None) -> list[str]:
    if key_file is None:
        key_file = tmp_path / "id"
        key_file.write_text(sshd.private_key)
    return [
        "--host", sshd.host, "--port", str(sshd.port), "--user", sshd.user,
        "--host-key", host_key or sshd.host_key, "--private-key-file", str(key_file),
        "--work-dir", str(tmp_path / "far"), "--python", FAR_PYTHON, "--slots", "3",
        "--price-usd-hr", "1.25",
    ]  # fmt: skip


def test_an_ssh_host_that_answers_is_added_with_an_offer_at_the_price(
    sshd, ssh_state, tmp_path, capsys
):
    call_command("add_provider", "ssh", "box-1", *_ssh_args(sshd, tmp_path))

    provider = Provider.objects.get(name="box-1")
    assert provider.kind == "ssh" and provider.config["port"] == sshd.port
    assert provider.credentials() == {"private_key": sshd.private_key}
    assert "PRIVATE KEY" not in str(provider.config)
    (offer,) = Offer.objects.filter(provider=provider)
    assert (offer.accelerator.name, offer.capacity, offer.price_per_gpu_hour_micros) == (
        "cpu",
        3,
        1_250_000,
    )
    out = capsys.readouterr().out
    assert "Added ssh provider box-1." in out and "$1.25/h" in out
    assert "PRIVATE KEY" not in out


def test_a_host_key_that_does_not_match_is_refused_and_nothing_saved(sshd, ssh_state, tmp_path):
    _, other_public = keygen(tmp_path / "other-host-key")
    with pytest.raises(CommandError, match=r"(?i)host key"):
        call_command(
            "add_provider", "ssh", "box-2", *_ssh_args(sshd, tmp_path, host_key=other_public)
        )
    assert not Provider.objects.filter(name="box-2").exists()
    assert not Offer.objects.filter(provider__name="box-2").exists()


def test_a_key_the_host_refuses_is_permission_denied_and_nothing_saved(sshd, ssh_state, tmp_path):
    stranger, _ = keygen(tmp_path / "stranger")
    key_file = tmp_path / "stranger-key"
    key_file.write_text(stranger)
    with pytest.raises(CommandError, match=r"(?i)permission denied"):
        call_command("add_provider", "ssh", "box-3", *_ssh_args(sshd, tmp_path, key_file=key_file))
    assert not Provider.objects.filter(name="box-3").exists()


def test_a_name_in_use_or_a_bad_price_is_refused(sshd, ssh_state, tmp_path):
    with pytest.raises(CommandError, match="exists already"):
        call_command("add_provider", "ssh", "local", *_ssh_args(sshd, tmp_path))
    args = _ssh_args(sshd, tmp_path)
    args[args.index("--price-usd-hr") + 1] = "lots"
    with pytest.raises(CommandError, match="--price-usd-hr"):
        call_command("add_provider", "ssh", "box-4", *args)


def test_the_admin_refuses_an_ssh_provider_whose_host_key_does_not_match(
    sshd, ssh_state, tmp_path, client, django_user_model
):
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw-12345678")
    client.force_login(operator)
    _, other_public = keygen(tmp_path / "other-host-key")
    config = (
        f'{{"host": "{sshd.host}", "port": {sshd.port}, "user": "{sshd.user}", '
        f'"host_key": "{other_public}", "python": "{FAR_PYTHON}", "slots": 1}}'
    )
    response = client.post(
        "/admin/providers/provider/add/",
        {
            "name": "box-5",
            "kind": "ssh",
            "config": config,
            "enabled": "on",
            "private_key": sshd.private_key,
            "offers-TOTAL_FORMS": "0",
            "offers-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert b"host key" in response.content.lower()
    assert b"PRIVATE KEY" not in response.content  # never echoed back
    assert not Provider.objects.filter(name="box-5").exists()
