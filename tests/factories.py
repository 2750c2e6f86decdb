import factory

from apps.accounts.models import Membership, Organization, Role, User
from apps.projects.models import Project


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct-horse-battery")


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Org {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")
    compute_enabled = True

    @factory.post_generation
    def credits_usd(org, create, extracted, **kwargs):
        """Credits granted to the new organization ($1,000 unless told; 0 for none), so
        its jobs can place their holds."""
        amount = 1000 if extracted is None else extracted
        if create and amount:
            from apps.billing import ledger
            from apps.core.money import usd_to_micros

            ledger.grant(
                organization=org,
                amount_micros=usd_to_micros(amount),
                idempotency_key=f"test-grant:{org.pk}",
                memo="test credits",
            )


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    organization = factory.SubFactory(OrganizationFactory)
    role = Role.MEMBER


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}")


def uploaded_dataset(project, *, name="Toy", dataset_format="alpaca", rows=None, filename=None):
    """A dataset uploaded through the real service (checked row by row, stored)."""
    import json

    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.finetunes.services import dataset_upload

    rows = rows or [
        {"instruction": "Add the numbers", "input": "2 and 3", "output": "5"},
        {"instruction": "Say hi", "output": "Hello there"},
        {"instruction": "Name a color", "output": "Blue"},
    ]
    content = "\n".join(json.dumps(row) for row in rows).encode() + b"\n"
    return dataset_upload(
        project=project,
        name=name,
        upload=SimpleUploadedFile(filename or f"{name.lower()}.jsonl", content),
        dataset_format=dataset_format,
    )
