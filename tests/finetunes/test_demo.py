"""`seed_demo` publishes the demo model and datasets to the demo organization's hub, and the
New Job page's fine-tune form is prefilled with them: a first fine-tune that names no host
path, so it runs on any runtime."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from apps.accounts.models import Organization, User
from apps.hub import repos
from apps.hub.blobs import open_blob
from apps.hub.models import HubCommit, HubRepo
from apps.jobs import services as job_services
from tests.factories import MembershipFactory, ProjectFactory
from tests.jobs.helpers import job_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.MEDIA_ROOT = tmp_path / "media"
    model = tmp_path / "demo" / "tiny-llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')  # built already
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return Organization.objects.get(slug="demo"), out.getvalue()


def test_seed_demo_publishes_the_model_and_a_dataset_per_format(seeded):
    demo, said = seeded
    names = set(HubRepo.objects.filter(organization=demo).values_list("kind", "name"))
    assert ("model", "tiny-llama") in names
    assert ("dataset", "demo-alpaca") in names
    assert {name for kind, name in names if kind == "dataset"} >= {
        "demo-alpaca",
        "demo-chatml",
        "demo-sharegpt",
        "demo-text",
    }
    model = repos.find_repo(demo, "model", "tiny-llama")
    [config] = repos.tree(repos.resolve(model, "main"))
    assert (config.path, open_blob(config.blob).read()) == (
        "config.json",
        b'{"model_type": "llama"}',
    )
    data = repos.tree(repos.resolve(repos.find_repo(demo, "dataset", "demo-alpaca"), "main"))
    assert [item.path for item in data] == ["train.jsonl"]
    assert b'"instruction": "Reverse the letters."' in open_blob(data[0].blob).read()
    assert "Demo fine-tune: model demo/tiny-llama and datasets demo/demo-alpaca" in said


def test_seeding_again_commits_nothing(seeded):
    demo, _ = seeded
    commits = HubCommit.objects.filter(repo__organization=demo).count()
    call_command("seed_demo", stdout=StringIO())
    assert HubCommit.objects.filter(repo__organization=demo).count() == commits


def test_the_seeded_project_takes_the_jobs_submitted_without_a_project(seeded):
    """The CLI's `trainyard jobs submit` without --project: the job shows in *Getting
    started*, the project the newcomer sees, and seeding again changes nothing."""
    demo, _ = seeded
    created = job_services.job_create(
        organization=demo, payload=job_body(), idempotency_key="first-cli-job"
    )
    call_command("seed_demo", stdout=StringIO())

    assert created.job.project.slug == "getting-started"
    assert list(demo.projects.values_list("slug", "is_default")) == [("getting-started", True)]


def test_the_finetune_form_is_prefilled_with_the_hub_repos_of_the_demo_only(seeded, client):
    demo, _ = seeded
    project = demo.projects.get(slug="getting-started")
    client.force_login(User.objects.get(username="demo"))
    page = client.get(f"/o/demo/projects/{project.slug}/jobs/new/").content.decode()
    assert 'value="demo/tiny-llama"' in page
    assert 'value="demo/demo-alpaca"' in page

    other = MembershipFactory(role="owner").organization
    ProjectFactory(organization=other, slug="p")
    client.force_login(other.memberships.get().user)
    page = client.get(f"/o/{other.slug}/projects/p/jobs/new/").content.decode()
    assert "demo/tiny-llama" not in page
