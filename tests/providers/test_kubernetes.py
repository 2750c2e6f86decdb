"""The kubernetes backend against the emulated cluster (tests/providers/kube/), beyond the
contract every backend keeps: queued with the scheduler's or Kueue's reason, a disrupted pod
reclaimed, an image that will not pull, no secret in any object the cluster keeps, one list
call per kind for a whole pass, and an operator's add_provider checked before it saves."""

from __future__ import annotations

import base64
import json

import pytest
from django.core.management import CommandError, call_command

from apps.catalog.models import Offer
from apps.providers.backends import backend_for
from apps.providers.backends.base import Bootstrap, LaunchRequest, PermanentBackendError
from apps.providers.models import Provider
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _gpu_launch(provider: Provider, image: str, gpus: int, *, attempt: int = 1):
    """A launch of `gpus` H100s straight through the backend (no placement: the cluster
    decides)."""
    backend = backend_for(provider)
    request = LaunchRequest(
        job_id=f"job_gpu{gpus}x{attempt}",
        attempt=attempt,
        accelerator="nvidia-h100-80gb",
        gpu_count=gpus,
        ephemeral_disk_gb=1,
        image=image,
    )
    bootstrap = Bootstrap(
        control_url="http://127.0.0.1:9", job_id=request.job_id, attempt=attempt, token="t0ken-x"
    )
    return backend, backend.launch(request, bootstrap)


def test_a_pod_no_node_can_take_is_queued_with_the_schedulers_message_then_runs(
    kubernetes_provider, kube_cluster, podman_image
):
    backend, handle = _gpu_launch(kubernetes_provider, podman_image, 3)
    try:
        queued = wait_until(
            lambda: (
                (r := backend.poll(handle)).state == "queued" and "Insufficient" in r.detail and r
            ),
            20,
            what="the scheduler's verdict",
        )
        assert "Insufficient nvidia.com/gpu" in queued.detail
        assert backend.poll_many([handle])[0].state == "queued"
        kube_cluster.set_node_gpus("gpu-node-1", 4)
        wait_until(lambda: backend.poll(handle).state != "queued", 20, what="the pod to be bound")
    finally:
        backend.release(handle)


def test_a_job_waiting_for_kueue_is_queued_until_admitted(
    kubernetes_provider, kube_cluster, podman_image
):
    kubernetes_provider.config = {**kubernetes_provider.config, "kueue_queue": "team-a"}
    kubernetes_provider.save()
    backend, handle = _gpu_launch(kubernetes_provider, podman_image, 1)
    try:
        [job] = kube_cluster.objects("jobs")
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        result = backend.poll(handle)
        assert (result.state, result.detail) == (
            "queued",
            "waiting for Kueue queue team-a (the Job is suspended)",
        )
        assert kube_cluster.objects("pods") == []
        kube_cluster.admit(handle["job"])
        wait_until(lambda: backend.poll(handle).state != "queued", 20, what="the admitted pod")
    finally:
        backend.release(handle)


def test_a_disrupted_pod_is_reclaimed_and_kubernetes_starts_no_second_one(
    kubernetes_provider, kube_cluster, live_server, podman_image
):
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, _ = launch_args(
        org, image=podman_image, control_url=live_server.url, command=["sleep", "60"]
    )
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: backend.poll(handle).state == "running", 60, what="the pod to run")
        wait_until(
            lambda: (
                (kube_cluster.pod_of(handle["job"]) or {}).get("status", {}).get("phase")
                == "Running"
            ),
            60,
            what="the container",
        )
        kube_cluster.disrupt(handle["job"])
        result = wait_until(
            lambda: (r := backend.poll(handle)).state == "reclaimed" and r, 30, what="the reclaim"
        )
        assert "preempting" in result.detail or "DisruptionTarget" in result.detail
        # The pod failure policy fails the Job once the pod has stopped: no second pod.
        wait_until(
            lambda: any(
                c["type"] == "Failed" and c["reason"] == "PodFailurePolicy"
                for c in kube_cluster.objects("jobs")[0]["status"].get("conditions", [])
            ),
            30,
            what="the Job to fail by its pod failure policy",
        )
        assert backend.poll(handle).state == "reclaimed"
        assert len(kube_cluster.objects("pods")) <= 1
    finally:
        backend.release(handle)


def test_an_image_that_cannot_be_pulled_fails_the_attempt_with_the_kubelets_message(
    kubernetes_provider, kube_cluster
):
    backend, handle = _gpu_launch(kubernetes_provider, "localhost/no-such-image:1", 1)
    try:
        result = wait_until(
            lambda: (r := backend.poll(handle)).state == "failed" and r, 60, what="the pull"
        )
        assert result.reason == "image_pull_failed"
        assert "no-such-image" in result.detail
        assert any("no-such-image" in line for line in backend.diagnostics(handle))
    finally:
        backend.release(handle)


def test_no_secret_value_is_in_any_object_the_cluster_keeps_and_release_removes_it(
    kubernetes_provider, kube_cluster, podman_image
):
    backend, handle = _gpu_launch(kubernetes_provider, podman_image, 1)
    [secret] = kube_cluster.objects("secrets")
    assert base64.b64decode(secret["data"]["token"]).decode() == "t0ken-x"
    [policy] = kube_cluster.objects("networkpolicies")  # nothing may connect to the pod
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in policy["spec"]
    [job] = kube_cluster.objects("jobs")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    wait_until(lambda: kube_cluster.objects("pods"), 20, what="the pod")
    for kind in ("jobs", "pods", "configmaps", "events"):
        text = json.dumps(kube_cluster.objects(kind))
        assert "t0ken-x" not in text and base64.b64encode(b"t0ken-x").decode() not in text, kind
    backend.release(handle)
    wait_until(
        lambda: not kube_cluster.objects("secrets") and not kube_cluster.objects("jobs"),
        20,
        what="the Job and its Secret to be gone",
    )
    backend.release(handle)  # idempotent


def test_a_pass_over_many_attempts_is_one_job_list_and_one_pod_list(
    kubernetes_provider, kube_cluster, podman_image
):
    launched = [_gpu_launch(kubernetes_provider, podman_image, 4, attempt=n) for n in (1, 2, 3)]
    backend = launched[0][0]
    handles = [handle for _, handle in launched]
    try:
        before = len(kube_cluster.requests())
        outcomes = backend.poll_many([*handles, {}])
        calls = [(r.method, r.path) for r in kube_cluster.requests()[before:]]
        ns = kube_cluster.namespace
        assert sorted(calls) == [
            ("GET", f"/api/v1/namespaces/{ns}/pods"),
            ("GET", f"/apis/batch/v1/namespaces/{ns}/jobs"),
        ]
        assert [o.state for o in outcomes[:3]] == ["queued"] * 3  # 4 GPUs on a 2-GPU node
        assert isinstance(outcomes[3], PermanentBackendError)
    finally:
        for handle in handles:
            backend.release(handle)


def _kubeconfig_file(kube_cluster, tmp_path) -> str:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(kube_cluster.kubeconfig_yaml)
    return str(path)


def test_add_provider_checks_the_cluster_and_offers_its_gpus_at_the_price(
    kube_cluster, tmp_path, capsys
):
    kube_cluster.add_node("gpu-node-2", gpus=8)
    call_command(
        "add_provider", "kubernetes", "cluster-1",
        "--kubeconfig", _kubeconfig_file(kube_cluster, tmp_path),
        "--namespace", kube_cluster.namespace, "--accelerator", "nvidia-h100-80gb",
        "--price-usd-hr", "2.10",
    )  # fmt: skip
    provider = Provider.objects.get(name="cluster-1")
    assert provider.credentials() == {"kubeconfig": kube_cluster.kubeconfig_yaml}
    assert kube_cluster.token not in json.dumps(provider.config)
    (offer,) = Offer.objects.filter(provider=provider)
    assert (offer.accelerator.name, offer.capacity, offer.gpu_counts) == (
        "nvidia-h100-80gb",
        10,
        [1, 2, 4, 8],
    )
    out = capsys.readouterr().out
    assert "Kubernetes v1.31" in out and "Added kubernetes provider cluster-1." in out
    assert kube_cluster.token not in out


def test_add_provider_names_a_missing_right_and_saves_nothing(kube_cluster, tmp_path):
    kube_cluster.deny("delete", "jobs", "batch")
    with pytest.raises(CommandError, match=r"may not delete jobs\.batch in namespace"):
        call_command(
            "add_provider", "kubernetes", "cluster-2",
            "--kubeconfig", _kubeconfig_file(kube_cluster, tmp_path),
            "--namespace", kube_cluster.namespace, "--price-usd-hr", "1",
        )  # fmt: skip
    assert not Provider.objects.filter(name="cluster-2").exists()


def test_add_provider_refuses_a_namespace_that_does_not_exist(kube_cluster, tmp_path):
    with pytest.raises(CommandError, match="namespace 'nowhere' does not exist"):
        call_command(
            "add_provider", "kubernetes", "cluster-3",
            "--kubeconfig", _kubeconfig_file(kube_cluster, tmp_path),
            "--namespace", "nowhere", "--price-usd-hr", "1",
        )  # fmt: skip
    assert not Provider.objects.filter(name="cluster-3").exists()


def test_a_cluster_out_of_reach_is_retryable_never_lost(kube_cluster, tmp_path):
    from apps.providers.backends.base import RetryableBackendError
    from apps.providers.backends.kubernetes import KubernetesBackend

    kubeconfig = kube_cluster.kubeconfig_yaml.replace(kube_cluster.url, "http://127.0.0.1:9")
    backend = KubernetesBackend({"namespace": "trainyard"}, {"kubeconfig": kubeconfig})
    with pytest.raises(RetryableBackendError):
        backend.poll_many([{"namespace": "trainyard", "job": "ty-job-x-1"}])


def _admin_post(client, kube_cluster, name: str, kubeconfig: str):
    return client.post(
        "/admin/providers/provider/add/",
        {
            "name": name,
            "kind": "kubernetes",
            "config": f'{{"namespace": "{kube_cluster.namespace}"}}',
            "enabled": "on",
            "kubeconfig": kubeconfig,
            "offers-TOTAL_FORMS": "0",
            "offers-INITIAL_FORMS": "0",
        },
    )


def test_the_admin_checks_a_cluster_before_saving_and_keeps_its_kubeconfig_write_only(
    kube_cluster, client, django_user_model
):
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw-12345678")
    client.force_login(operator)
    kube_cluster.deny("create", "secrets")
    refused = _admin_post(client, kube_cluster, "cluster-4", kube_cluster.kubeconfig_yaml)
    assert refused.status_code == 200  # the form again, with the error
    assert b"may not create secrets" in refused.content
    assert kube_cluster.token.encode() not in refused.content
    assert not Provider.objects.filter(name="cluster-4").exists()

    kube_cluster.reset()
    saved = _admin_post(client, kube_cluster, "cluster-4", kube_cluster.kubeconfig_yaml)
    assert saved.status_code == 302
    provider = Provider.objects.get(name="cluster-4")
    assert provider.credentials() == {"kubeconfig": kube_cluster.kubeconfig_yaml}
    page = client.get(f"/admin/providers/provider/{provider.pk}/change/")
    assert page.status_code == 200 and kube_cluster.token.encode() not in page.content
