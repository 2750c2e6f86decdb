"""`manage.py grant_credits --org SLUG --usd N [--memo TEXT] [--key IDEMPOTENCY_KEY]`.

An operator's grant of credits to an organization's wallet. Give `--key` to make a retry
safe: a key already used grants nothing again and says so. Prints the new balance.
"""

import uuid
from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError

from apps.accounts.models import Organization
from apps.billing import ledger
from apps.billing.models import Transfer
from apps.core.money import format_usd, usd_to_micros


class Command(BaseCommand):
    help = "Grant credits (US dollars) to an organization's wallet."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--org", required=True, help="organization slug")
        parser.add_argument("--usd", required=True, help="dollars to grant, more than 0")
        parser.add_argument("--memo", default="", help="why (shown in its transactions)")
        parser.add_argument("--key", default="", help="idempotency key (default: a new one)")

    def handle(self, *args, org: str, usd: str, memo: str, key: str, **options) -> None:
        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            raise CommandError(f"No organization with slug {org!r}.")
        micros = _positive_micros(usd)
        key = key or f"grant-credits:{uuid.uuid4().hex}"
        earlier = Transfer.objects.filter(idempotency_key=key).first()
        if earlier is not None:
            self.stdout.write(
                f"The key {key!r} was used already ({format_usd(earlier.amount_micros)} "
                f"{earlier.code}): nothing granted again."
            )
        else:
            ledger.grant(
                organization=organization,
                amount_micros=micros,
                idempotency_key=key,
                memo=memo or "granted by an operator",
            )
            self.stdout.write(f"Granted {format_usd(micros)} to {organization.slug}.")
        balance = ledger.balance(organization.pk)
        self.stdout.write(
            f"Balance of {organization.slug}: {format_usd(balance.balance_micros)} "
            f"({format_usd(balance.available_micros)} available)."
        )


def _positive_micros(usd: str) -> int:
    try:
        amount = Decimal(usd)
    except InvalidOperation as exc:
        raise CommandError(f"--usd must be a number of dollars, not {usd!r}.") from exc
    micros = usd_to_micros(amount) if amount.is_finite() else 0
    if not micros or micros <= 0:
        raise CommandError(f"--usd must be more than 0 (got {usd}).")
    return micros
