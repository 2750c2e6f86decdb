"""The sweep pages: a project's sweeps with their progress and best trial, one sweep's
trials with the best highlighted and a link to compare them, and cancel."""

from __future__ import annotations

import pytest

from apps.jobs.models import Job
from apps.sweeps import services
from apps.sweeps.models import Sweep
from tests.sweeps.test_sweeps_api import _end, _trial_jobs, sweep_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(org, project, member) -> Sweep:
    created = services.sweep_create(
        organization=org, project=project, body=sweep_body(concurrency=2), created_by=member
    )
    first, second, *_ = _trial_jobs(created.sweep)
    for job, loss in ((first, 0.7), (second, 0.3)):
        Job.objects.filter(pk=job.pk).update(metric_series={"loss": {"step": 4, "value": loss}})
        _end(job)
    return created.sweep


def _url(org, project, sweep=None, suffix=""):
    base = f"/o/{org.slug}/projects/{project.slug}/sweeps/"
    return f"{base}{sweep.public_id}/{suffix}" if sweep else f"{base}{suffix}"


def test_the_project_lists_its_sweeps_with_progress_and_the_best(
    client_for, member, org, project, sweep
):
    page = client_for(member).get(_url(org, project)).content.decode()

    assert sweep.name in page and "running" in page
    assert "2 succeeded · 0 failed · 4 trials" in page
    # In the order PostgreSQL keeps a JSON object's keys (shorter first), as on the API.
    assert "#1: loss 0.3 · max_steps=4 · learning_rate=0.001" in page


def test_the_sweep_page_highlights_the_best_trial_and_links_to_compare(
    client_for, member, org, project, sweep
):
    response = client_for(member).get(_url(org, project, sweep))

    assert response.status_code == 200
    page = response.content.decode()
    assert '<tr data-trial="1" class="best" aria-label="best trial">' in page
    assert page.count('class="best"') == 1
    jobs = [job.public_id for job in _trial_jobs(sweep) if job is not None]
    assert len(jobs) == 4  # two ended, so the next two started
    assert f'href="/o/{org.slug}/jobs/compare/?ids={",".join(jobs)}"' in page
    assert "Cancel sweep" in page
    assert "running · 4 trials: 2 succeeded, 2 requested" in page
    assert 'hx-trigger="every 5s"' in page  # reloaded while it runs


def test_a_member_cancels_a_sweep_from_its_page_and_a_viewer_cannot(
    client_for, member, viewer, org, project, sweep
):
    url = _url(org, project, sweep, "cancel/")

    assert client_for(viewer).post(url).status_code == 403
    assert Sweep.objects.get(pk=sweep.pk).state == "running"
    response = client_for(member).post(url)

    assert response.status_code == 302
    page = client_for(member).get(response["Location"]).content.decode()
    assert "stopped: cancelled" in page and "Cancel sweep" not in page
    assert "hx-trigger" not in page  # nothing left to follow


def test_another_organizations_sweep_page_is_not_found(client_for, outsider, org, project, sweep):
    assert client_for(outsider).get(_url(org, project, sweep)).status_code == 404
    assert client_for(outsider).post(_url(org, project, sweep, "cancel/")).status_code == 404
    assert Sweep.objects.get(pk=sweep.pk).state == "running"


FORM = {
    "name": "from the page",
    "kind": "finetune",
    "template": "name: tiny\nmodel: /models/tiny\ndataset: /data/alpaca.jsonl\n"
    "dataset_format: alpaca\n",
    "params": "learning_rate: [1.0e-3, 3.0e-3]\nmax_steps: [2, 4]\n",
    "method": "grid",
    "concurrency": "2",
    "max_cost_usd": "1.5",
    "objective": "loss",
    "direction": "minimize",
}


def test_a_member_starts_a_sweep_from_the_form(client_for, member, org, project):
    response = client_for(member).post(_url(org, project, suffix="new/"), FORM)

    assert response.status_code == 302
    sweep = Sweep.objects.get()
    assert response["Location"] == _url(org, project, sweep)
    assert (sweep.name, sweep.concurrency, sweep.max_cost_micros) == ("from the page", 2, 1_500_000)
    assert sweep.trials.count() == 4 and Job.objects.count() == 2


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        ({"params": "learning_rate: [1.0e-3, 0]\n"}, "0 is not a valid learning_rate"),
        ({"params": "max_steps: [2]\nlearning_rate: [1.0e-3\n"}, "Not valid YAML at line 2"),
        ({"template": "name: tiny\nmodel: /models/tiny\n"}, "This field is required."),
    ],
    ids=["bad-value", "bad-yaml", "template-missing-dataset"],
)
def test_a_refused_sweep_form_shows_why_and_creates_nothing(
    client_for, member, org, project, change, shown
):
    response = client_for(member).post(_url(org, project, suffix="new/"), FORM | change)

    assert response.status_code == 400
    assert shown in response.content.decode()
    assert not Sweep.objects.exists() and not Job.objects.exists()


def test_a_viewer_gets_no_sweep_form(client_for, viewer, org, project):
    assert client_for(viewer).get(_url(org, project, suffix="new/")).status_code == 403
    assert "New sweep" not in client_for(viewer).get(_url(org, project)).content.decode()
