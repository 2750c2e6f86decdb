"""`manage.py create_api_key --org SLUG [--name NAME] [--role ROLE]`.

Prints a line about the key, then the key itself alone on the last line, so scripts can take
it with `tail -n 1`. The key is not stored and cannot be shown again.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.accounts import services
from apps.accounts.models import Organization, Role


class Command(BaseCommand):
    help = "Create an API key for an organization and print it once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--org", required=True, help="organization slug")
        parser.add_argument("--name", default="cli", help="what the key is for")
        parser.add_argument("--role", default=Role.MEMBER, choices=Role.values)

    def handle(self, *args, org: str, name: str, role: str, **options) -> None:
        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            raise CommandError(f"No organization with slug {org!r}.")
        key, full_key = services.api_key_create(organization=organization, name=name, role=role)
        self.stdout.write(
            f"Created API key {key.prefix} ({name!r}, role {role}) for {organization.slug}. "
            "It is shown once:"
        )
        self.stdout.write(full_key)
