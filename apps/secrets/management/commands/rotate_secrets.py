"""`manage.py rotate_secrets`: re-encrypt every secret, and every provider's credentials,
with the newest key of SECRETS_KEYS.

Rotate by prepending a new key to SECRETS_KEYS, deploying, running this, and only then
removing the old key. Safe to run again; it prints how many secrets it re-encrypted.

A row that no key of SECRETS_KEYS opens (its key was dropped too early) is left untouched
and listed by name and organization (never a value); the command then exits 1, because
dropping any old key is not yet safe and jobs naming those secrets fail
`secret_undecryptable`.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.secrets import services


class Command(BaseCommand):
    help = "Re-encrypt every secret with the first (newest) key of SECRETS_KEYS."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=services.ROTATE_BATCH_SIZE)

    def handle(self, *args, batch_size: int, **options) -> None:
        secrets = services.secrets_rotate(batch_size=batch_size)
        self.stdout.write(f"Re-encrypted {secrets.rotated} secrets with the newest key.")
        providers = services.provider_credentials_rotate()
        self.stdout.write(f"Re-encrypted the credentials of {providers.rotated} providers.")
        lost = len(secrets.undecryptable) + len(providers.undecryptable)
        if not lost:
            return
        self.stderr.write("No key in SECRETS_KEYS decrypts these (left as they are):")
        for secret in secrets.undecryptable:
            self.stderr.write(
                f"  secret {secret.name!r} ({secret.public_id}) "
                f"of organization {secret.organization.slug!r}"
            )
        for provider in providers.undecryptable:
            self.stderr.write(f"  credentials of provider {provider.name!r}")
        raise CommandError(
            f"{lost} could not be decrypted: put back the key they were encrypted with "
            "(anywhere in SECRETS_KEYS) and run this again, or write them again."
        )
