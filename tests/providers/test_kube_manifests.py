"""What the kubernetes backend asks a cluster for: every manifest validates in strict mode
against the Kubernetes schemas, carries no secret, and says what the provider's config asks;
and how the cluster's answers read as attempt states."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from apps.providers.backends import kube_manifests as manifests
from apps.providers.backends.base import LaunchRequest
from apps.providers.backends.bundle import bundle_sha256, runner_bundle

TOKEN = "ty-runner-token-value-0123456789"
KUBERNETES_VERSION = "1.31"


def _request(**overrides) -> LaunchRequest:
    values = {
        "job_id": "job_AbC123xyz",
        "attempt": 2,
        "accelerator": "h100-80gb",
        "gpu_count": 4,
        "ephemeral_disk_gb": 30,
        "image": "registry.example/train:1",
        "max_runtime_hours": 2.0,
    }
    return LaunchRequest(**{**values, **overrides})


FULL_CONFIG = {
    "namespace": "ml",
    "gpu_resource": "nvidia.com/gpu",
    "node_selector": {"nvidia.com/gpu.product": "H100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "image_pull_secrets": ["regcred"],
    "service_account": "trainyard-workloads",
    "priority_class": "batch-low",
    "kueue_queue": "team-a",
    "cpu": "8",
    "memory": "64Gi",
    "memory_limit": "96Gi",
    "shm_size": "16Gi",
}


def _job(config=FULL_CONFIG, **overrides) -> dict:
    return manifests.job_manifest(
        config=config,
        request=_request(**overrides),
        control_url="https://trainyard.example",
        runner_sha256=bundle_sha256(),
        grace_s=9.5,
    )


def _validate(document: dict) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_every_object_validates_strictly_against_the_kubernetes_schemas():
    labels = manifests.attempt_labels(_request(), "ty-job-abc123xyz-2")
    for document in (
        _job(),
        _job(config={}, accelerator="cpu", max_runtime_hours=None),
        manifests.token_secret("ml", "ty-job-abc123xyz-2", TOKEN, labels),
        manifests.runner_configmap("ml", bundle_sha256(), runner_bundle()),
        manifests.network_policy("ml"),
        manifests.network_policy("ml", ["10.0.0.0/8", "172.16.0.0/12"]),
    ):
        _validate(document)


def test_the_job_keeps_kubernetes_from_restarting_an_attempt_behind_our_back():
    job = _job()
    spec = job["spec"]
    assert job["metadata"]["name"] == "ty-job-abc123xyz-2"
    assert spec["backoffLimit"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == 10
    assert spec["activeDeadlineSeconds"] == 2 * 3600 + manifests.DEADLINE_MARGIN_S


def test_the_pod_gets_what_the_providers_config_says():
    pod = _job()["spec"]["template"]["spec"]
    workload = pod["containers"][0]
    assert workload["resources"] == {
        "requests": {"ephemeral-storage": "30Gi", "cpu": "8", "memory": "64Gi"},
        "limits": {"nvidia.com/gpu": "4", "memory": "96Gi"},
    }
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "trainyard-workloads"
    assert pod["priorityClassName"] == "batch-low"
    assert pod["automountServiceAccountToken"] is False
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    mounts = {mount["name"]: mount["mountPath"] for mount in workload["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm"


def test_the_network_policy_lets_nothing_connect_to_a_workload_and_egress_only_if_asked():
    closed = manifests.network_policy("ml")["spec"]
    assert closed == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "trainyard"}},
        "policyTypes": ["Ingress"],
    }
    walled = manifests.network_policy("ml", ["10.0.0.0/8"])["spec"]
    assert walled["policyTypes"] == ["Ingress", "Egress"]
    assert walled["egress"][0]["to"][0]["ipBlock"] == {
        "cidr": "0.0.0.0/0",
        "except": ["10.0.0.0/8"],
    }
    assert "ingress" not in walled
    labels = _job()["spec"]["template"]["metadata"]["labels"]
    assert closed["podSelector"]["matchLabels"].items() <= labels.items()


def test_a_cpu_attempt_asks_for_no_gpu():
    workload = _job(config={}, accelerator="cpu")["spec"]["template"]["spec"]["containers"][0]
    assert "limits" not in workload["resources"]


def test_a_kueue_queue_creates_the_job_suspended_with_its_label():
    job = _job()
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][manifests.KUEUE_QUEUE_LABEL] == "team-a"
    assert "suspend" not in _job(config={})["spec"]


def test_no_secret_is_in_the_job_and_only_the_init_container_mounts_the_token():
    job = _job()
    assert TOKEN not in json.dumps(job)
    pod = job["spec"]["template"]["spec"]
    for container in pod["initContainers"] + pod["containers"]:
        for variable in container.get("env") or []:
            assert "valueFrom" not in variable
            assert "TOKEN" not in variable["name"] or variable["value"].startswith("/")
    mounting_the_secret = [
        container["name"]
        for container in pod["initContainers"] + pod["containers"]
        if any(mount["name"] == "token-secret" for mount in container["volumeMounts"])
    ]
    assert mounting_the_secret == ["token"]


def test_job_names_are_dns_labels_the_same_for_every_launch_of_an_attempt():
    name = manifests.job_name("job_" + "X" * 80, 12)
    assert len(name) <= 63 and name.endswith("-12") and name == name.lower()
    assert (
        manifests.job_name("job_ab", 1)
        == manifests.job_name("job_ab", 1)
        != (manifests.job_name("job_ab", 2))
    )


def _pod(phase: str, *, state: dict | None = None, conditions=(), init: dict | None = None):
    status: dict = {"phase": phase, "conditions": list(conditions)}
    if state is not None:
        status["containerStatuses"] = [{"name": "workload", "state": state}]
    if init is not None:
        status["initContainerStatuses"] = [{"name": "token", "state": init}]
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-12-07T00:00:00Z"},
        "status": status,
    }


JOB = {"metadata": {"name": "ty-job-1"}, "spec": {}, "status": {}}
SCHEDULED = {"type": "PodScheduled", "status": "True"}


@pytest.mark.parametrize(
    ("job", "pods", "expected"),
    [
        (None, [], ("lost", None, "")),
        ({**JOB, "spec": {"suspend": True}}, [], ("queued", None, "")),
        (JOB, [], ("queued", None, "")),
        (
            JOB,
            [
                _pod(
                    "Pending",
                    conditions=[
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                        }
                    ],
                )
            ],
            ("queued", None, ""),
        ),
        (
            JOB,
            [
                _pod(
                    "Pending",
                    conditions=[SCHEDULED],
                    init={"waiting": {"reason": "ErrImagePull", "message": "not found"}},
                )
            ],
            ("failed", None, "image_pull_failed"),
        ),
        (JOB, [_pod("Pending", conditions=[SCHEDULED])], ("running", None, "")),
        (JOB, [_pod("Running", conditions=[SCHEDULED])], ("running", None, "")),
        (
            JOB,
            [_pod("Failed", state={"terminated": {"exitCode": 7, "message": '{"exit_code": 7}'}})],
            ("exited", 7, ""),
        ),
        (
            JOB,
            [
                _pod(
                    "Failed",
                    state={"terminated": {"exitCode": 137, "message": '{"started": true}'}},
                )
            ],
            ("lost", None, ""),
        ),
        (
            JOB,
            [_pod("Failed", state={"terminated": {"exitCode": 127, "message": ""}})],
            ("exited", 127, ""),
        ),
        (
            JOB,
            [_pod("Failed", state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})],
            ("failed", None, "out_of_memory"),
        ),
        (
            JOB,
            [
                _pod(
                    "Failed",
                    state={"terminated": {"exitCode": 143, "message": '{"started": true}'}},
                    conditions=[{"type": "DisruptionTarget", "status": "True", "message": "x"}],
                )
            ],
            ("reclaimed", None, ""),
        ),
        (
            JOB,
            [
                _pod(
                    "Running",
                    state={"running": {}},
                    conditions=[{"type": "DisruptionTarget", "status": "True", "message": "x"}],
                )
            ],
            ("running", None, ""),
        ),
        (
            {
                **JOB,
                "status": {
                    "conditions": [
                        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}
                    ]
                },
            },
            [],
            ("reclaimed", None, ""),
        ),
    ],
    ids=[
        "job-gone",
        "suspended",
        "no-pod-yet",
        "unschedulable",
        "image-pull",
        "container-creating",
        "running",
        "exit-record",
        "no-exit-record",
        "runner-never-ran",
        "oom-killed",
        "disrupted-pod",
        "disrupted-pod-still-stopping",
        "pod-failure-policy",
    ],
)
def test_what_the_cluster_says_reads_as_the_attempts_state(job, pods, expected):
    result = manifests.attempt_state(job, pods)
    assert (result.state, result.exit_code, result.reason) == expected
