"""Jobs run for real on the kubernetes provider (the emulated cluster, tests/providers/kube/,
whose pods are podman containers): API → Celery dispatch → a Job → the runner in its pod →
ingestion → a final state; a pod no node can take waits unbilled with the scheduler's words;
an image that will not pull fails the job saying so; a preempted fine-tune resumes."""

from __future__ import annotations

import pytest

from apps.jobs.models import Attempt
from apps.providers.backends import kube_manifests
from apps.providers.models import Provider
from tests.factories import ProjectFactory
from tests.integration.conftest import TERMINAL
from tests.integration.held_trainer import hold_at_checkpoint, release_when_signalled
from tests.integration.stack import wait_for
from tests.integration.test_hub_run import hub_model_and_data, published_repo
from tests.integration.test_preemption_run import (
    assert_reclaimed_then_resumed_to_the_end,
    submit_finetune,
)
from tests.providers.kube_provider import make_kubernetes_provider, pod_url

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def cluster_provider(kube_cluster, live_stack) -> Provider:
    """The emulated cluster as the only enabled provider; its pods reach the stack."""
    return make_kubernetes_provider(
        kube_cluster.kubeconfig_yaml,
        namespace=kube_cluster.namespace,
        control_url=pod_url(live_stack.url),
    )


def test_an_api_job_runs_in_a_pod_to_succeeded_and_leaves_nothing_behind(
    cluster_provider, kube_cluster, api, podman_image
):
    job = api.submit(command=["bash", "-c", 'echo "hello from pod $HOSTNAME"'], image=podman_image)
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["exit_code"], done["reason"]) == ("succeeded", 0, None)
    attempt = Attempt.objects.get(job__public_id=job["id"])
    name = kube_manifests.job_name(job["id"], 1)
    assert attempt.provider == cluster_provider
    assert attempt.handle == {"namespace": kube_cluster.namespace, "job": name}
    assert attempt.billing_started_at is not None
    [line] = [line["message"] for line in api.logs(job["id"], source="user")]
    assert line.startswith(f"hello from pod {name}-")
    # Released: the Job, its pod and its token Secret are gone (the runner's ConfigMap stays).
    wait_for(
        lambda: not any(kube_cluster.objects(kind) for kind in ("jobs", "pods", "secrets")),
        30,
        what="the attempt's objects to be deleted",
    )


def test_a_pod_no_node_can_take_waits_unbilled_with_the_schedulers_words(
    cluster_provider, kube_cluster, api, podman_image
):
    cluster_provider.config = {**cluster_provider.config, "cpu": "64"}  # the node has 8
    cluster_provider.save()
    job = api.submit(command=["true"], image=podman_image)

    def queue_reason() -> str:
        attempts = api.job(job["id"])["attempts"]
        return attempts[-1]["queue_reason"] if attempts else ""

    reason = wait_for(
        lambda: "Insufficient cpu" in queue_reason() and queue_reason(), 60, what="the reason"
    )
    assert reason.startswith("Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.")
    waiting = api.job(job["id"])
    assert (waiting["state"], waiting["accrued_usd"]) == ("provisioning", 0)
    assert waiting["attempts"][0]["billing_started_at"] is None

    api.terminate(job["id"])
    assert api.wait_state(job["id"], TERMINAL, timeout=60)["state"] == "terminated"
    wait_for(lambda: not kube_cluster.objects("jobs"), 30, what="the Job to be deleted")


def test_an_image_that_cannot_be_pulled_fails_the_job_with_the_kubelets_words(
    cluster_provider, kube_cluster, api
):
    missing = f"{kube_cluster.url.removeprefix('http://')}/no-such-image:1"
    job = api.submit(command=["true"], image=missing)
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["reason"]) == ("failed", "image_pull_failed")
    [failed] = [e for e in api.events(job["id"]) if e["data"].get("to") == "failed"]
    assert "no-such-image" in failed["message"]
    system = " ".join(line["message"] for line in api.logs(job["id"], source="system"))
    assert "ErrImagePull" in system or "ImagePullBackOff" in system


# The trainer is held still while its pod is preempted (tests/integration/held_trainer.py),
# so a short run is certain to be found mid-training.
STEPS = 24


def test_a_preemptible_finetune_whose_pod_is_preempted_resumes_from_its_checkpoint(
    cluster_provider, kube_cluster, api, compute_org, live_stack, tiny_model, demo_data,
    trainer_image,
):  # fmt: skip
    """Model and data from the organization's hub (a pod sees no path of this host); the
    pod's grace is long enough for the trainer to save and upload its checkpoint."""
    cluster_provider.config = {**cluster_provider.config, "termination_grace_s": 30}
    cluster_provider.save()
    project = ProjectFactory(organization=compute_org)
    from_hub = hub_model_and_data(live_stack, compute_org, tiny_model, demo_data)
    finetune = submit_finetune(
        api, project, "cpu", tiny_model, demo_data, priority="preemptible", max_steps=STEPS,
        from_hub=from_hub,
    )  # fmt: skip
    held = hold_at_checkpoint(finetune, 4)

    kube_cluster.disrupt(kube_manifests.job_name(finetune, 1))  # the scheduler's preemption
    release_when_signalled(held)

    assert_reclaimed_then_resumed_to_the_end(api, finetune, STEPS)  # steps never go back
    first = Attempt.objects.get(job__public_id=finetune, number=1)
    assert first.end_reason == "reclaimed"
    assert published_repo(api, finetune) == f"{compute_org.slug}/tiny-lora"
