import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from apps.accounts.models import ApiKey, Role
from apps.jobs.api.serializers import JobOut
from apps.jobs.models import Job, JobEvent
from apps.jobs.selectors import as_created
from apps.secrets import services as secret_services
from tests.factories import ProjectFactory
from tests.jobs.helpers import job_body, script_b64

pytestmark = pytest.mark.django_db

ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@host"
)


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def post(api, body, key="key-1"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post("/api/v1/compute/jobs", body, format="json", **headers)


def test_it_creates_a_requested_job_with_the_reference_shape(api, org):
    response = post(api, job_body(limits={"max_runtime_hours": 2, "max_cost_usd": 5}))
    assert response.status_code == 201
    body = response.json()
    assert body["id"].startswith("job_")
    assert body["state"] == "requested"
    assert body["reason"] is None
    assert body["kind"] == "container"
    assert body["compute"] == {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10}
    assert body["limits"] == {
        "max_runtime_hours": 2.0,
        "max_cost_usd": 5.0,
        "max_price_usd_hr": None,
    }
    assert body["accrued_usd"] == 0
    assert body["endpoints"] == []
    assert body["attempts"] == []
    for field in (
        "hardware",
        "price_usd_hr",
        "allocated_at",
        "ssh",
        "started_at",
        "terminal_at",
        "exit_code",
    ):
        assert body[field] is None, field
    job = Job.objects.get(public_id=body["id"])
    assert job.organization == org
    assert job.project.slug == "default"
    assert body["project"] == job.project.public_id
    assert list(JobEvent.objects.filter(job=job).values_list("type", flat=True)) == ["job_created"]


def test_a_job_without_a_project_lands_in_the_project_marked_default(api, org, other_org):
    """What the CLI does without --project: in the demo organization, the seeded *Getting
    started* (marked default) shows the job, and no hidden *Default* project is made."""
    ProjectFactory(organization=other_org, name="Theirs", slug="theirs", is_default=True)
    ProjectFactory(organization=org, name="First", slug="first")
    marked = ProjectFactory(
        organization=org, name="Getting started", slug="getting-started", is_default=True
    )

    response = post(api, job_body())

    assert response.status_code == 201
    assert response.json()["project"] == marked.public_id
    assert Job.objects.get().project == marked
    assert sorted(org.projects.values_list("slug", flat=True)) == ["first", "getting-started"]


def test_without_a_marked_project_the_default_project_is_made_once_and_marked(api, org):
    ProjectFactory(organization=org, name="Vision", slug="vision")

    first = post(api, job_body(), key="key-1")
    second = post(api, job_body(name="again"), key="key-2")

    assert (first.status_code, second.status_code) == (201, 201)
    default = org.projects.get(slug="default")
    assert (default.name, default.is_default) == ("Default", True)
    assert {first.json()["project"], second.json()["project"]} == {default.public_id}


def test_the_same_key_and_body_returns_the_same_job_with_200(api):
    first = post(api, job_body())
    again = post(api, job_body())
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1


def test_the_same_key_with_another_body_is_409_idempotency_conflict(api):
    post(api, job_body())
    response = post(api, job_body(name="other"))
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "idempotency_conflict"
    assert Job.objects.count() == 1


def test_keys_are_scoped_to_the_organization(api, api_client_for, other_org):
    mine = post(api, job_body())
    theirs = post(api_client_for(other_org), job_body())
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine.json()["id"]


def test_no_idempotency_key_is_400(api):
    response = post(api, job_body(), key=None)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": "The Idempotency-Key header is required.",
        "param": "Idempotency-Key",
    }
    assert not Job.objects.exists()


def test_the_created_answer_is_the_job_as_a_read_shows_it(api, org, django_assert_num_queries):
    """The 201 is built from the job as created, not read again (a fifth of a submit's
    time): it says exactly what a read says, and building it costs no query."""
    created = post(api, job_body(limits={"max_runtime_hours": 2, "max_cost_usd": 5}))
    read = api.get(f"/api/v1/compute/jobs/{created.json()['id']}")
    assert (created.status_code, read.status_code) == (201, 200)
    assert created.json() == read.json()
    job = Job.objects.select_related("project").get(public_id=created.json()["id"])
    with django_assert_num_queries(0):
        assert JobOut(as_created(job)).data["attempts"] == []


# serialized_rollback restores the migrations' seed rows (the catalog) that a flush removes.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_two_identical_requests_at_the_same_moment_create_one_job(org):
    from apps.accounts import services as account_services

    _, full_key = account_services.api_key_create(organization=org, name="race")
    barrier = threading.Barrier(2)
    results: list[tuple[int, str]] = []

    def submit():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {full_key}")
        barrier.wait()
        response = post(client, job_body(), key="same-moment")
        results.append((response.status_code, response.json()["id"]))
        connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(code for code, _ in results) == [200, 201]
    assert len({job_id for _, job_id in results}) == 1
    assert Job.objects.count() == 1


def test_a_script_job_is_accepted(api):
    body = job_body(container={"image": "img", "script_b64": script_b64("echo hi\n")})
    response = post(api, body)
    assert response.status_code == 201
    assert response.json()["container"]["command"] is None


def test_a_project_of_the_org_is_used(api, project):
    response = post(api, job_body(project=project.public_id))
    assert response.json()["project"] == project.public_id


def test_a_project_of_another_org_is_404(api, other_project):
    response = post(api, job_body(project=other_project.public_id))
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"
    assert not Job.objects.exists()


def test_a_viewer_cannot_create_jobs(api_client_for, org):
    response = post(api_client_for(org, role=Role.VIEWER), job_body())
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_denied"


def test_compute_disabled_is_tenant_disabled(api, org):
    org.compute_enabled = False
    org.save()
    response = post(api, job_body())
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "tenant_disabled"


def test_the_creator_key_is_recorded(api, org):
    job_id = post(api, job_body()).json()["id"]
    assert Job.objects.get(public_id=job_id).created_by_key == ApiKey.objects.get(organization=org)


def _container(**fields):
    return {"image": "img", "command": ["true"], **fields}


def _compute(**fields):
    return {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10, **fields}


BAD_BODIES = [
    ("unknown accelerator", {"compute": _compute(accelerator="tpu-v9")}, "compute.accelerator"),
    (
        "gpu count not offered",
        {"compute": {**_compute(accelerator="nvidia-l40s-48gb"), "gpu_count": 3}},
        "compute.gpu_count",
    ),
    (
        "disk missing",
        {"compute": {"accelerator": "cpu", "gpu_count": 1}},
        "compute.ephemeral_disk_gb",
    ),
    ("disk zero", {"compute": _compute(ephemeral_disk_gb=0)}, "compute.ephemeral_disk_gb"),
    ("disk huge", {"compute": _compute(ephemeral_disk_gb=10**6)}, "compute.ephemeral_disk_gb"),
    (
        "both command and script",
        {"container": _container(script_b64=script_b64("ls"))},
        "container.command",
    ),
    ("neither command nor script", {"container": {"image": "img"}}, "container.command"),
    ("command not a list", {"container": _container(command="echo hi")}, "container.command"),
    (
        "command of non-strings",
        {"container": _container(command=[{"a": 1}])},
        "container.command.0",
    ),
    (
        "script not base64",
        {"container": {"image": "img", "script_b64": "%%%not base64"}},
        "container.script_b64",
    ),
    (
        "reserved env prefix",
        {"container": _container(env={"TRAINYARD_JOB_ID": "x"})},
        "container.env.TRAINYARD_JOB_ID",
    ),
    (
        "platform-owned env",
        {"container": _container(env={"HF_ENDPOINT": "x"})},
        "container.env.HF_ENDPOINT",
    ),
    (
        "invalid env name",
        {"container": _container(env={"1BAD-NAME": "x"})},
        "container.env.1BAD-NAME",
    ),
    (
        "unknown secret",
        {
            "container": _container(
                secret_env={"HF_TOKEN": {"secret_id": "sec_doesnotexist0000", "key": "HF_TOKEN"}}
            )
        },
        "container.secret_env.HF_TOKEN",
    ),
    (
        "malformed ssh key",
        {"access": {"ssh_public_key": "ssh-ed25519 not-a-key"}},
        "access.ssh_public_key",
    ),
    (
        "ssh key of wrong type",
        {"access": {"ssh_public_key": "ssh-dss AAAAB3NzaC1kc3M= x"}},
        "access.ssh_public_key",
    ),
    ("zero runtime", {"limits": {"max_runtime_hours": 0}}, "limits.max_runtime_hours"),
    ("negative cost", {"limits": {"max_cost_usd": -1}}, "limits.max_cost_usd"),
    ("negative price ceiling", {"limits": {"max_price_usd_hr": -0.5}}, "limits.max_price_usd_hr"),
    ("unknown field", {"colour": "blue"}, "colour"),
    ("name missing", {"name": None}, "name"),
]


@pytest.mark.parametrize(("case", "override", "param"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_a_bad_request_is_400_with_its_param_and_creates_nothing(api, case, override, param):
    response = post(api, job_body(**override))
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["param"] == param
    assert error["message"]
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_a_body_that_is_not_an_object_is_400(api):
    response = post(api, ["not", "an", "object"])
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"


def test_another_orgs_secret_is_rejected_like_a_missing_one(api, other_org):
    secret = secret_services.secret_create(
        organization=other_org, name="theirs", data={"HF_TOKEN": "hf_theirs"}
    )
    body = job_body(
        container=_container(
            secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}}
        )
    )
    response = post(api, body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "container.secret_env.HF_TOKEN"


def test_secret_env_stores_references_never_values(api, org):
    secret = secret_services.secret_create(
        organization=org, name="hub", data={"HF_TOKEN": "hf_super_secret_value"}
    )
    body = job_body(
        container=_container(
            secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}}
        ),
        access={"ssh_public_key": ED25519},
    )
    response = post(api, body)
    assert response.status_code == 201
    assert "hf_super_secret_value" not in response.content.decode()
    job = Job.objects.get(public_id=response.json()["id"])
    assert "hf_super_secret_value" not in str(job.spec)
    assert job.spec["container"]["secret_env"] == {
        "HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}
    }
