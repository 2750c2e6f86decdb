"""`manage.py rotate_secrets`: re-encrypt every secret, and every provider's credentials,
with the newest key of SECRETS_KEYS.

Rotate by prepending a new key to SECRETS_KEYS, deploying, running this, and only then
removing the old key. Safe to run again; it prints how many secrets it re-encrypted.
"""

from django.core.management.base import BaseCommand

from apps.secrets import services


class Command(BaseCommand):
    help = "Re-encrypt every secret with the first (newest) key of SECRETS_KEYS."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=services.ROTATE_BATCH_SIZE)

    def handle(self, *args, batch_size: int, **options) -> None:
        count = services.secrets_rotate(batch_size=batch_size)
        self.stdout.write(f"Re-encrypted {count} secrets with the newest key.")
        providers = services.provider_credentials_rotate()
        self.stdout.write(f"Re-encrypted the credentials of {providers} providers.")
