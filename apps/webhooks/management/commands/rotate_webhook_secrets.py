"""`manage.py rotate_webhook_secrets`: re-encrypt every webhook's signing secret with the
newest key of SECRETS_KEYS (run it beside `rotate_secrets`, before dropping an old key).
Safe to run again. A secret no key opens is listed by webhook id and organization and left
as it is; the command then exits 1 (rotate that webhook's secret to replace it)."""

from django.core.management.base import BaseCommand, CommandError

from apps.webhooks import services


class Command(BaseCommand):
    help = "Re-encrypt every webhook signing secret with the newest key of SECRETS_KEYS."

    def handle(self, *args, **options) -> None:
        rotated, undecryptable = services.webhook_secrets_reencrypt()
        self.stdout.write(f"Re-encrypted the secrets of {rotated} webhooks with the newest key.")
        if not undecryptable:
            return
        for webhook in undecryptable:
            self.stderr.write(
                f"  webhook {webhook.public_id} of organization {webhook.organization.slug!r}"
            )
        raise CommandError(
            f"{len(undecryptable)} webhook secrets could not be decrypted: put back their key, "
            "or rotate those webhooks' secrets."
        )
