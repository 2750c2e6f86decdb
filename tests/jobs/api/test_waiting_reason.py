"""Why a job waits (`waiting_reason` in the API, the job page, `trainyard jobs get`) and the
dry run (`POST /api/v1/compute/jobs/plan`, `trainyard jobs plan`), both by placement's own
rules. The CLI runs in-process against this test's server: its HTTP goes through Django's
test client."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.billing.models import Transfer
from apps.catalog.models import Offer
from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.models import Job, JobEvent
from apps.projects.models import Project
from apps.providers.models import Provider
from tests.jobs.helpers import job_body
from trainyard_cli.main import run

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/compute/jobs"
PLAN = "/api/v1/compute/jobs/plan"


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


@pytest.fixture
def cli(cli_transport):
    """Run a `trainyard` command line against this test's app; (exit code, stdout)."""

    def invoke(capsys, *argv: str) -> tuple[int, str]:
        code = run(list(argv), transport=cli_transport)
        return code, capsys.readouterr().out

    return invoke


def _multi_tenant_local() -> None:
    """The seeded local provider runs containers for every organization (podman)."""
    Provider.objects.filter(name="local").update(
        config={"runtime": "podman", "multi_tenant": False}
    )


def _host_path_finetune(org, project) -> Job:
    config = {
        "model": "/srv/models/tiny",
        "dataset": "./data/train.jsonl",
        "dataset_format": "alpaca",
    }
    payload = payloads.job_payload(name="ft", project_id=project.public_id, config=config)
    return services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job


def _local_cpu(offers: list[dict]) -> dict:
    local = Offer.objects.get(provider__name="local", accelerator__name="cpu")
    (row,) = [o for o in offers if o["offer"] == local.pk]
    return row


def test_a_host_path_finetune_on_a_multi_tenant_provider_says_runtime_tenancy_in_the_api(
    api, org, project
):
    _multi_tenant_local()
    job = _host_path_finetune(org, project)
    assert dispatch.allocate(job.pk) is None  # placement passes it over

    body = api.get(f"{JOBS}/{job.public_id}").json()
    assert body["state"] == "requested"
    reason = body["waiting_reason"]
    local = _local_cpu(reason["offers"])
    assert local["provider"] == "local"
    assert local["excluded"] == "runtime_tenancy"
    assert "/srv/models/tiny" in local["message"]
    assert "single-tenant" in reason["summary"]
    assert all(o["excluded"] for o in reason["offers"])  # nothing could take it

    (listed,) = [j for j in api.get(JOBS).json()["data"] if j["id"] == job.public_id]
    assert listed["waiting_reason"] == reason

    # On a single-tenant host it is placed, and a placed job no longer waits.
    Provider.objects.filter(name="local").update(config={"runtime": "host", "multi_tenant": False})
    assert dispatch.allocate(job.pk) is not None
    assert api.get(f"{JOBS}/{job.public_id}").json()["waiting_reason"] is None


def test_the_job_page_says_why_a_host_path_finetune_waits(client_for, member, org, project):
    _multi_tenant_local()
    job = _host_path_finetune(org, project)

    page = client_for(member).get(reverse("job-detail", args=[org.slug, job.public_id]))
    assert page.status_code == 200
    html = page.content.decode()
    status = html[html.index('id="job-status"') : html.index("</details>")]
    assert 'data-excluded="runtime_tenancy"' in status
    assert "single-tenant provider" in status


def test_trainyard_jobs_get_says_why_a_host_path_finetune_waits(cli, capsys, org, project):
    _multi_tenant_local()
    job = _host_path_finetune(org, project)

    code, out = cli(capsys, "jobs", "get", job.public_id)
    assert code == 0
    assert "waiting" in out
    assert "runtime_tenancy" in out
    assert "single-tenant" in out


def _two_offers(slots):
    cheap = slots(1, price=600_000)
    dear = slots(1, price=3_000_000)
    return cheap, dear


def test_plan_names_the_offer_and_every_exclusion_and_creates_nothing(api, org, slots):
    cheap, dear = _two_offers(slots)
    body = job_body(
        compute={"accelerator": slots.accelerator, "gpu_count": 1, "ephemeral_disk_gb": 10},
        limits={"max_price_usd_hr": 1.0},
    )
    transfers = Transfer.objects.filter(organization=org).count()

    response = api.post(PLAN, body, format="json")

    assert response.status_code == 200
    plan = response.json()
    assert plan["offer"]["offer"] == cheap.pk
    assert plan["offer"]["price_usd_hr"] == 0.6
    by_offer = {o["offer"]: o for o in plan["offers"]}
    assert by_offer[cheap.pk]["excluded"] is None
    assert by_offer[dear.pk]["excluded"] == "price_ceiling"
    assert "$3.00" in by_offer[dear.pk]["message"]
    assert _local_cpu(plan["offers"])["excluded"] == "accelerator"
    assert plan["hold_usd"] > 0
    # Nothing written: no job, event, hold or default project.
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()
    assert Transfer.objects.filter(organization=org).count() == transfers
    assert not Project.objects.filter(organization=org).exists()


def test_plan_with_nothing_to_take_it_answers_no_offer(api, org, slots):
    _, dear = _two_offers(slots)
    cheap = Offer.objects.get(
        price_per_gpu_hour_micros=600_000, accelerator__name=slots.accelerator
    )
    cheap.capacity = 0  # full
    cheap.save()
    body = job_body(
        compute={"accelerator": slots.accelerator, "gpu_count": 1, "ephemeral_disk_gb": 10},
        limits={"max_price_usd_hr": 1.0},
    )
    plan = api.post(PLAN, body, format="json").json()
    assert plan["offer"] is None
    by_offer = {o["offer"]: o for o in plan["offers"]}
    assert by_offer[cheap.pk]["excluded"] == "capacity_full"
    assert by_offer[dear.pk]["excluded"] == "price_ceiling"
    assert "0 of 0 free" in plan["summary"]  # the nearest miss


@pytest.mark.parametrize(
    "body",
    [
        {"name": "no compute"},
        ["not", "an", "object"],
        job_body(compute={"accelerator": "cpu", "gpu_count": -1, "ephemeral_disk_gb": 10}),
        job_body(project="proj_nope"),
        job_body(limits={"max_price_usd_hr": 0.000001}),  # under every offer's floor: 422
    ],
)
def test_plan_refuses_a_bad_body_exactly_as_create_does(api, body):
    planned = api.post(PLAN, body, format="json")
    created = api.post(JOBS, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert planned.status_code >= 400
    assert (planned.status_code, planned.json()) == (created.status_code, created.json())
    assert not Job.objects.exists()


def test_trainyard_jobs_plan_lists_the_exclusions(cli, capsys, org, slots):
    cheap, _ = _two_offers(slots)
    code, out = cli(
        capsys, "jobs", "plan", "python:3.12", "--accelerator", slots.accelerator,
        "--max-price", "1", "--", "python", "-c", "print(1)",
    )  # fmt: skip
    assert code == 0
    assert f"offer {cheap.pk}" in out
    assert "price_ceiling" in out
    assert "accelerator" in out
    assert not Job.objects.exists()
