"""What the kubernetes backend asks a cluster for, and how it reads what the cluster says:
plain dicts in, plain dicts out (no client, no network), so the manifests are validated
against the Kubernetes schemas in a test and the state mapping is read in one place.

One attempt is:
- a `batch/v1` Job named after the attempt (`job_name`), `backoffLimit: 0` and `restartPolicy:
  Never`, with a `podFailurePolicy` whose `DisruptionTarget` rule fails the Job: Kubernetes
  never starts a second pod inside an attempt (an evicted or preempted pod would otherwise be
  replaced behind the control plane's back, unbilled and uncounted); Trainyard places the job
  again and resumes it from its checkpoint;
- a Secret `<job>-token` holding only the runner token, owned by the Job (deleted with it).
  Only the init container mounts it: it copies the token into a memory-backed `emptyDir`,
  where the runner reads the file and deletes it, as on every other backend. Nothing secret
  is in the Job or pod object: no env literal, annotation or argument carries a value;
- the runner itself, as an immutable ConfigMap `trainyard-runner-<sha256[:16]>` holding the
  zipapp (`bundle.runner_bundle`), shared by every attempt of that runner version and
  mounted read-only. The job's image needs `python3` and nothing of Trainyard's.

The workload's pod gets no service account token (`automountServiceAccountToken: false`), no
service links, the `RuntimeDefault` seccomp profile and no privilege escalation.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from apps.providers.backends.base import LaunchRequest, PollResult
from runner import protocol

MANAGED_BY = {"app.kubernetes.io/managed-by": "trainyard"}
ATTEMPT_LABEL = "trainyard.dev/attempt-name"
JOB_LABEL = "trainyard.dev/job"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RUNNER_DIR = "/opt/trainyard"
RUNNER_FILE = "runner.pyz"
WORK_DIR = "/work"
TOKEN_DIR = "/var/run/trainyard/token"
TOKEN_SECRET_DIR = "/var/run/trainyard/secret"
TOKEN_KEY = "token"
TERMINATION_LOG = "/dev/termination-log"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# A Job left behind (a control plane that died before `release`) is removed by the cluster
# this long after it finished.
DEFAULT_TTL_AFTER_FINISHED_S = 24 * 3600
# The Job's own deadline is the job's max runtime plus this: the control plane's limit (with
# its grace and reason) comes first.
DEADLINE_MARGIN_S = 300
# The container waiting reasons that mean the image will not come.
IMAGE_PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})
# The init container copies the token where the runner may delete it after reading.
TOKEN_COPY = (
    "import os, shutil; "
    f"target = '{TOKEN_DIR}/{TOKEN_KEY}'; "
    f"shutil.copyfile('{TOKEN_SECRET_DIR}/{TOKEN_KEY}', target); "
    "os.chmod(target, 0o600)"
)
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def job_name(job_id: str, attempt: int) -> str:
    """The attempt's Job name: a DNS-1123 label (63 characters at most), the same for every
    launch of the attempt, so a repeated launch finds the Job it made before."""
    base = _UNSAFE.sub("-", job_id.lower()).strip("-")
    suffix = f"-{int(attempt)}"
    return f"ty-{base}"[: 63 - len(suffix)].rstrip("-") + suffix


def token_secret_name(name: str) -> str:
    return f"{name}-token"


def runner_configmap_name(sha256: str) -> str:
    return f"trainyard-runner-{sha256[:16]}"


def runner_configmap(namespace: str, sha256: str, bundle: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": runner_configmap_name(sha256),
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {"trainyard.dev/sha256": sha256},
        },
        "immutable": True,
        "binaryData": {RUNNER_FILE: base64.b64encode(bundle).decode("ascii")},
    }


def token_secret(namespace: str, name: str, token: str, labels: Mapping[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token_secret_name(name),
            "namespace": namespace,
            "labels": dict(labels),
        },
        "type": "Opaque",
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode("ascii")},
    }


NETWORK_POLICY_NAME = "trainyard-workloads"


def network_policy(namespace: str, egress_except: Sequence[str] = ()) -> dict[str, Any]:
    """The namespace's NetworkPolicy for Trainyard's pods: nothing may connect to them (a
    workload needs no inbound connection: its runner calls out). With `egress_except`
    (CIDRs: the cluster's service and pod ranges, say), their traffic out goes anywhere but
    there, DNS aside."""
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": dict(MANAGED_BY)},
        "policyTypes": ["Ingress"],
    }
    if egress_except:
        spec["policyTypes"].append("Egress")
        spec["egress"] = [
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [str(c) for c in egress_except]}}]},
            {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NETWORK_POLICY_NAME,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "spec": spec,
    }


def owned_by(job: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes an object owned by `job` (as the cluster returned it)."""
    meta = job["metadata"]
    return {
        "metadata": {
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": False,
                }
            ]
        }
    }


def attempt_labels(request: LaunchRequest, name: str) -> dict[str, str]:
    return {**MANAGED_BY, ATTEMPT_LABEL: name, JOB_LABEL: _label_value(request.job_id)}


def job_manifest(
    *,
    config: Mapping[str, Any],
    request: LaunchRequest,
    control_url: str,
    runner_sha256: str,
    grace_s: float,
) -> dict[str, Any]:
    """The attempt's Job. `control_url` is where its runner reaches the control plane; the
    provider's config adds the rest (docs/kubernetes.md lists the keys)."""
    namespace = namespace_of(config)
    name = job_name(request.job_id, request.attempt)
    labels = attempt_labels(request, name)
    queue = str(config.get("kueue_queue") or "")
    job_labels = {**labels, KUEUE_QUEUE_LABEL: queue} if queue else dict(labels)
    env = [
        {"name": protocol.ENV_CONTROL_URL, "value": control_url},
        {"name": protocol.ENV_JOB_ID, "value": request.job_id},
        {"name": protocol.ENV_ATTEMPT, "value": str(request.attempt)},
        {"name": protocol.ENV_WORKDIR, "value": WORK_DIR},
        {"name": protocol.ENV_RUNNER_TOKEN_FILE, "value": f"{TOKEN_DIR}/{TOKEN_KEY}"},
        {"name": protocol.ENV_EXIT_MESSAGE_FILE, "value": TERMINATION_LOG},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    relay = str(config.get("relay_url") or "").strip()
    if relay:
        env.append({"name": protocol.ENV_RELAY_URL, "value": relay})
    hardened = {"allowPrivilegeEscalation": False}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(0, math.ceil(grace_s)),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [
            {
                "name": "token",
                "image": request.image,
                "imagePullPolicy": str(config.get("image_pull_policy") or "IfNotPresent"),
                "command": ["python3", "-c", TOKEN_COPY],
                "volumeMounts": [
                    {"name": "token-secret", "mountPath": TOKEN_SECRET_DIR, "readOnly": True},
                    {"name": "token", "mountPath": TOKEN_DIR},
                ],
                "securityContext": hardened,
            }
        ],
        "containers": [
            {
                "name": "workload",
                "image": request.image,
                "imagePullPolicy": str(config.get("image_pull_policy") or "IfNotPresent"),
                "command": ["python3", f"{RUNNER_DIR}/{RUNNER_FILE}"],
                "workingDir": WORK_DIR,
                "env": env,
                "resources": _resources(config, request),
                "volumeMounts": [
                    {"name": "runner", "mountPath": RUNNER_DIR, "readOnly": True},
                    {"name": "token", "mountPath": TOKEN_DIR},
                    {"name": "work", "mountPath": WORK_DIR},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
                "terminationMessagePath": TERMINATION_LOG,
                "terminationMessagePolicy": "File",
                "securityContext": hardened,
            }
        ],
        "volumes": [
            {
                "name": "runner",
                "configMap": {
                    "name": runner_configmap_name(runner_sha256),
                    "defaultMode": 0o444,
                },
            },
            {
                "name": "token-secret",
                "secret": {"secretName": token_secret_name(name), "defaultMode": 0o400},
            },
            {"name": "token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "work", "emptyDir": {"sizeLimit": f"{int(request.ephemeral_disk_gb)}Gi"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm(config)}},
        ],
    }
    for key, field in (
        ("service_account", "serviceAccountName"),
        ("priority_class", "priorityClassName"),
        ("runtime_class", "runtimeClassName"),
    ):
        if config.get(key):
            pod_spec[field] = str(config[key])
    if config.get("node_selector"):
        pod_spec["nodeSelector"] = {
            str(k): str(v) for k, v in dict(config["node_selector"]).items()
        }
    if config.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in config["tolerations"]]
    if config.get("image_pull_secrets"):
        pod_spec["imagePullSecrets"] = [{"name": str(n)} for n in config["image_pull_secrets"]]
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
        "ttlSecondsAfterFinished": int(
            config.get("ttl_seconds_after_finished", DEFAULT_TTL_AFTER_FINISHED_S)
        ),
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if request.max_runtime_hours:
        spec["activeDeadlineSeconds"] = math.ceil(request.max_runtime_hours * 3600) + (
            DEADLINE_MARGIN_S
        )
    if queue:
        spec["suspend"] = True  # Kueue unsuspends the Job when it admits it
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels},
        "spec": spec,
    }


def namespace_of(config: Mapping[str, Any]) -> str:
    return str(config.get("namespace") or "default")


def gpu_resource(config: Mapping[str, Any]) -> str:
    return str(config.get("gpu_resource") or DEFAULT_GPU_RESOURCE)


def _resources(config: Mapping[str, Any], request: LaunchRequest) -> dict[str, Any]:
    requests: dict[str, str] = {"ephemeral-storage": f"{int(request.ephemeral_disk_gb)}Gi"}
    limits: dict[str, str] = {}
    if request.accelerator != "cpu" and request.gpu_count > 0:
        # An extended resource is asked for by its limit (the request follows it).
        limits[gpu_resource(config)] = str(int(request.gpu_count))
    for key, field in (("cpu", "cpu"), ("memory", "memory")):
        if config.get(key):
            requests[field] = str(config[key])
    if config.get("memory_limit"):
        limits["memory"] = str(config["memory_limit"])
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def _shm(config: Mapping[str, Any]) -> str:
    return str(config.get("shm_size") or "1Gi")


def _label_value(value: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63]
    return cleaned.strip("-_.") or "x"


# -- reading what the cluster says ----------------------------------------------------------


def attempt_state(
    job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], *, queue: str = ""
) -> PollResult:
    """What became of an attempt, from its Job (None: gone) and the Job's pods."""
    if job is None:
        return PollResult("lost", detail="the attempt's Kubernetes Job is gone")
    conditions = _true_conditions(job.get("status"))
    pod = _newest(pods)
    # A disrupted pod is reclaimed once it has stopped: until then its workload is saving a
    # checkpoint in its grace period, and a release would cut that short.
    stopping = pod is not None and (pod.get("status") or {}).get("phase") == "Running"
    failed = conditions.get("Failed")
    disruption = _true_conditions((pod or {}).get("status")).get("DisruptionTarget")
    if failed and failed.get("reason") == "PodFailurePolicy":
        # The pod's own words (who disrupted it and why) when it is still there.
        said = _message(disruption or failed, "the pod was disrupted")
        return PollResult("reclaimed", detail=said)
    if disruption and not stopping:
        return PollResult("reclaimed", detail=_message(disruption, "the pod was disrupted"))
    if pod is None:
        if (job.get("spec") or {}).get("suspend"):
            where = f"Kueue queue {queue}" if queue else "the cluster's admission"
            return PollResult("queued", detail=f"waiting for {where} (the Job is suspended)")
        if "DeadlineExceeded" in {c.get("reason") for c in conditions.values()}:
            # The cluster killed it at the Job's deadline (SIGKILL's code).
            return PollResult("exited", exit_code=137, detail="the Job's deadline passed")
        if conditions.get("Failed") or conditions.get("Complete"):
            return PollResult("lost", detail="the attempt's pod is gone")
        return PollResult("queued", detail="waiting for the Job's pod to be created")
    return _pod_state(pod, job_deleted=bool(job.get("metadata", {}).get("deletionTimestamp")))


def _pod_state(pod: Mapping[str, Any], *, job_deleted: bool) -> PollResult:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    init = _container_status(status, "initContainerStatuses")
    main = _container_status(status, "containerStatuses")
    if phase == "Pending":
        scheduled = _conditions(status).get("PodScheduled")
        if scheduled is None or scheduled.get("status") != "True":
            reason = (scheduled or {}).get("reason") or "waiting to be scheduled"
            message = (scheduled or {}).get("message") or ""
            return PollResult("queued", detail=f"{reason}: {message}" if message else reason)
        for container in (init, main):
            waiting = (container or {}).get("state", {}).get("waiting") or {}
            reason = waiting.get("reason") or ""
            if reason in IMAGE_PULL_FAILURES:
                return PollResult(
                    "failed",
                    reason="image_pull_failed",
                    detail=_message(waiting, f"the image could not be pulled ({reason})"),
                )
            if reason in CONFIG_FAILURES:
                return PollResult(
                    "failed",
                    reason="launch_failed",
                    detail=_message(waiting, f"the container could not be created ({reason})"),
                )
        return PollResult("running")  # the node is ours; the containers are starting
    if phase == "Running":
        return PollResult("running")
    if phase not in ("Succeeded", "Failed"):
        return PollResult("running")
    init_ended = (init or {}).get("state", {}).get("terminated") or {}
    if init_ended.get("exitCode"):  # the token copy failed: an image without python3, say
        return PollResult(
            "exited",
            exit_code=int(init_ended["exitCode"]),
            detail=f"the init container failed: {_message(init_ended, 'no message')}",
        )
    ended = (main or {}).get("state", {}).get("terminated") or {}
    record = read_exit_message(str(ended.get("message") or ""))
    if record.get("exit_code") is not None:
        return PollResult("exited", exit_code=int(record["exit_code"]))
    if ended.get("reason") == "OOMKilled":
        return PollResult(
            "failed",
            reason="out_of_memory",
            detail="the attempt's container ran out of memory and was killed (OOMKilled)",
        )
    code = ended.get("exitCode")
    if code == 143 and pod.get("metadata", {}).get("deletionTimestamp") and not job_deleted:
        return PollResult("reclaimed", detail="the pod was deleted from outside Trainyard")
    if record.get("started"):
        return PollResult("lost", detail="the runner's container ended with no exit record")
    # The runner never ran (an image without python3, say): the container's own code.
    return PollResult("exited", exit_code=int(code) if code is not None else -1)


def read_exit_message(message: str) -> dict[str, Any]:
    """The runner's termination message: `{"started": true}` once it runs, its exit record
    (`{"exit_code": …}`) once it ends; {} when it never wrote one."""
    try:
        parsed = json.loads(message.strip().splitlines()[-1]) if message.strip() else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def waiting_lines(pod: Mapping[str, Any]) -> list[str]:
    """The pod's own account of why it has not started (for a job page's system log)."""
    status = pod.get("status") or {}
    lines = []
    condition = _conditions(status).get("PodScheduled")
    if condition and condition.get("status") != "True" and condition.get("message"):
        lines.append(f"pod {condition.get('reason')}: {condition['message']}")
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting.get("message"):
                lines.append(f"{container.get('name')}: {waiting['reason']}: {waiting['message']}")
    return lines


def _conditions(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (status or {}).get("conditions") or [] if c.get("type")}


def _true_conditions(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {k: c for k, c in _conditions(status).items() if c.get("status") == "True"}


def _container_status(status: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    statuses = status.get(key) or []
    return statuses[0] if statuses else None


def _newest(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    if not pods:
        return None
    return max(pods, key=lambda pod: str(pod.get("metadata", {}).get("creationTimestamp") or ""))


def _message(source: Mapping[str, Any], default: str) -> str:
    return str(source.get("message") or "").strip() or default
