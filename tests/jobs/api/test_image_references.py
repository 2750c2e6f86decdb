"""`container.image` is a registry reference, never a transport or a path (T3-13): at submit,
through the API and the New Job page alike, a 400 `invalid_request` on `container.image`."""

from __future__ import annotations

import pytest

from apps.jobs.models import Job, JobEvent
from apps.providers.backends.containers import IMAGE_REFERENCE_HELP
from tests.jobs.helpers import job_body
from tests.jobs.web.test_new_job_page import PAGE, container_data, field_errors

pytestmark = pytest.mark.django_db

DIGEST = "sha256:" + "0123456789abcdef" * 4
REFUSED = [
    "docker-archive:/etc/hostname",
    "docker-archive:relative.tar",
    "oci-archive:/etc/shadow",
    "dir:/etc",
    "dir:5000/x",  # also `host:port/path` in shape: podman reads the transport
    "containers-storage:python:3.11",
    "docker-daemon:python:3.11",
    "oci:/var/lib/layout",
    "oci:layout",
    "OCI-ARCHIVE:/etc/shadow",
    "sif:/tmp/image.sif",
    "tarball:/tmp/rootfs.tar",
    "ostree:/ostree/repo",
    "docker://python:3.11",
    "someday-transport:/etc/hostname",
    "/etc/hostname",
    "./image.tar",
    "../image",
    "~/image.tar",
    DIGEST,  # a local image id
    "0123456789abcdef" * 4,
    "Python:3.11",
    "python:3.11 --privileged",
    "python:3.11\nx",
]
ACCEPTED = [
    "local",
    "python:3.11-slim",
    "python",
    "docker:24-dind",
    "library/python:3.12",
    "ghcr.io/org/team/image:1.0",
    "localhost:5000/train:latest",
    "registry.example/team/train:1",
    f"python@{DIGEST}",
    f"nvcr.io/nvidia/pytorch:24.01-py3@{DIGEST}",
    "[::1]:5000/image",
]


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def submit(api, image: str):
    body = job_body(container={"image": image, "command": ["true"]})
    return api.post(
        "/api/v1/compute/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=f"k-{image!r}"
    )


@pytest.mark.parametrize("image", REFUSED)
def test_a_transport_or_path_is_400_on_container_image(api, image):
    response = submit(api, image)

    assert response.status_code == 400, response.json()
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": IMAGE_REFERENCE_HELP,
        "param": "container.image",
    }
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


@pytest.mark.parametrize("image", ACCEPTED)
def test_a_registry_reference_is_accepted(api, image):
    response = submit(api, image)

    assert response.status_code == 201, response.json()
    assert Job.objects.get().spec["container"]["image"] == image


def test_the_new_job_page_refuses_a_transport_next_to_the_image(client_for, member, project):
    response = client_for(member).post(
        PAGE, container_data(command="true", image="docker-archive:/etc/hostname")
    )

    assert response.status_code == 200
    assert field_errors(response, "container-image") == [IMAGE_REFERENCE_HELP]
    assert not Job.objects.exists()
