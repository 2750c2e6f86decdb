"""`manage.py seed_demo`: the demo organization, project and user that `make run` signs you
in with, and the organization's credits (granted once). Safe to run any number of times; it
never resets a password that was changed."""

import os

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.accounts.models import Membership, Organization, Role, User
from apps.billing import ledger
from apps.core.money import format_usd
from apps.finetunes.demo import (
    demo_datasets_dir,
    demo_model_dir,
    grant_demo_credits,
    publish_demo_assets,
)
from apps.projects.models import Project

DEMO_ORG = "demo"

DEMO_USER = "demo"


class Command(BaseCommand):
    help = "Create the demo organization, project and user (idempotent)."

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        password = os.environ.get("DEMO_PASSWORD", "trainyard-demo")
        org, _ = Organization.objects.get_or_create(
            slug=DEMO_ORG, defaults={"name": "Demo", "compute_enabled": True}
        )
        if not org.compute_enabled:
            org.compute_enabled = True
            org.save(update_fields=["compute_enabled"])
        user, created = User.objects.get_or_create(
            username=DEMO_USER, defaults={"email": "demo@example.com"}
        )
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        Membership.objects.get_or_create(user=user, organization=org, defaults={"role": Role.OWNER})
        project, _ = Project.objects.get_or_create(
            organization=org,
            slug="getting-started",
            defaults={
                "name": "Getting started",
                "description": "A first project to submit jobs in.",
            },
        )
        # Jobs submitted without a project (the CLI's, by default) land here, not in a
        # *Default* project the newcomer never made; unless another is already marked.
        if not Project.objects.filter(organization=org, is_default=True).exists():
            Project.objects.filter(pk=project.pk).update(is_default=True)
        grant_demo_credits(org)
        balance = ledger.balance(org.pk).balance_micros
        self.stdout.write(f"Demo credits: balance {format_usd(balance)}")
        shown = password if created else f"{password} (unless it was changed since)"
        self._seed_finetune_assets(org)
        self.stdout.write(f"Demo ready: sign in at {settings.WEB_URL}/ as {DEMO_USER} / {shown}")

    def _seed_finetune_assets(self, org: Organization) -> None:
        """A tiny base model (built here, no hub download) and a small dataset in each
        format, published to the demo organization's hub, so a first fine-tune runs offline
        on CPU in about a minute, on the host or in a container."""
        try:  # imported here: trainer.tiny needs torch (the `train` extra), which may be absent
            from trainer.demo_data import write_demo_datasets
            from trainer.tiny import build_tiny_model
        except ImportError:
            self.stdout.write(
                "The trainer is not installed (pip install -e '.[train]'): no demo model."
            )
            return
        model_dir = demo_model_dir()
        if not (model_dir / "config.json").exists():
            build_tiny_model(model_dir)
        datasets = write_demo_datasets(demo_datasets_dir())
        published = publish_demo_assets(org, model_dir, datasets)
        self.stdout.write(
            f"Demo fine-tune: model {published[0]} and datasets {', '.join(published[1:])} "
            "in the demo organization's hub (Models, Datasets)"
        )
