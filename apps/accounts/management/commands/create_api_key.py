"""`manage.py create_api_key --org SLUG [--name NAME] [--role ROLE]`.

Without `--name` the key is named `cli` (`cli-2`, `cli-3`... when an active key has that
name already, so running it again works); a `--name` an active key of the organization has
is refused, as on the settings page.

Prints a line about the key, then the key itself alone on the last line, so scripts can take
it with `tail -n 1`. The key is not stored and cannot be shown again.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.accounts import services
from apps.accounts.models import Organization, Role
from apps.core.errors import InvalidRequest


class Command(BaseCommand):
    help = "Create an API key for an organization and print it once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--org", required=True, help="organization slug")
        parser.add_argument("--name", default=None, help="what the key is for (default: cli)")
        parser.add_argument("--role", default=Role.MEMBER, choices=Role.values)

    def handle(self, *args, org: str, name: str | None, role: str, **options) -> None:
        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            raise CommandError(f"No organization with slug {org!r}.")
        if name is None:
            name = services.api_key_free_name(organization, "cli")
        try:
            key, full_key = services.api_key_create(organization=organization, name=name, role=role)
        except InvalidRequest as exc:
            raise CommandError(str(exc.detail)) from exc
        self.stdout.write(
            f"Created API key {key.prefix} ({key.name!r}, role {role}) for {organization.slug}. "
            "It is shown once:"
        )
        self.stdout.write(full_key)
