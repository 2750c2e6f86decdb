"""The emulated Kubernetes cluster (tests/providers/kube), through the official client over
real HTTP: the API's answers and errors, and Jobs whose pods run as podman containers."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
import yaml
from kubernetes import client, config

from tests.live import wait_until

pytestmark = [pytest.mark.live]

NS = "trainyard"


@pytest.fixture
def api(kube_cluster) -> client.ApiClient:
    return config.new_client_from_config_dict(yaml.safe_load(kube_cluster.kubeconfig_yaml))


@pytest.fixture
def core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def batch(api) -> client.BatchV1Api:
    return client.BatchV1Api(api)


def _secret(name: str, **values: str) -> client.V1Secret:
    return client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=values)


def test_version_namespace_and_nodes(api, core, kube_cluster):
    assert client.VersionApi(api).get_code().git_version == "v1.31.0-emulated"
    assert core.read_namespace(NS).status.phase == "Active"
    (node,) = core.list_node().items
    assert node.metadata.name == "gpu-node-1"
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert node.status.allocatable["nvidia.com/gpu"] == "2"
    with pytest.raises(client.ApiException) as missing:
        core.read_namespace("elsewhere")
    assert missing.value.status == 404


def test_a_secret_keeps_string_data_as_base64_data_only(core, kube_cluster):
    created = core.create_namespaced_secret(NS, _secret("creds", token="s3cret"))
    assert created.data == {"token": base64.b64encode(b"s3cret").decode()}
    assert created.string_data is None
    assert int(created.metadata.resource_version) > 0 and created.metadata.uid
    (stored,) = kube_cluster.objects("secrets")
    assert "stringData" not in stored


def test_a_duplicate_create_is_409_already_exists(core):
    core.create_namespaced_secret(NS, _secret("twice", a="1"))
    with pytest.raises(client.ApiException) as duplicate:
        core.create_namespaced_secret(NS, _secret("twice", a="2"))
    assert duplicate.value.status == 409
    body = json.loads(duplicate.value.body)
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "twice", "kind": "secrets"}


def test_404_and_401_are_status_objects(batch, kube_cluster):
    with pytest.raises(client.ApiException) as missing:
        batch.read_namespaced_job("nope", NS)
    assert missing.value.status == 404
    assert json.loads(missing.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'jobs.batch "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "batch", "kind": "jobs"},
        "code": 404,
    }
    request = urllib.request.Request(f"{kube_cluster.url}/apis/batch/v1/namespaces/{NS}/jobs")
    request.add_header("Authorization", "Bearer wrong")
    with pytest.raises(urllib.error.HTTPError) as unauthorized:
        urllib.request.urlopen(request, timeout=10)
    assert unauthorized.value.code == 401
    body = json.loads(unauthorized.value.read())
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)


def test_label_selectors(core, kube_cluster):
    for name, tier in (("a", "gold"), ("b", "silver"), ("c", "bronze")):
        core.create_namespaced_config_map(
            NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"tier": tier}))
        )
    core.create_namespaced_config_map(
        NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="d"))
    )

    def names(selector: str) -> list[str]:
        listed = core.list_namespaced_config_map(NS, label_selector=selector)
        return [item.metadata.name for item in listed.items]

    assert names("tier in (gold, silver)") == ["a", "b"]
    assert names("tier notin (gold)") == ["b", "c", "d"]
    assert names("tier=bronze") == ["c"]
    assert names("tier!=bronze,tier") == ["a", "b"]
    assert names("!tier") == ["d"]
    lists = [r for r in kube_cluster.requests() if r.method == "GET" and r.path.endswith("maps")]
    assert len(lists) == 5 and lists[0].query == {"labelSelector": "tier in (gold, silver)"}


def test_a_denied_right_is_forbidden_and_reviewed_as_such(api, batch, kube_cluster):
    def allowed(verb: str) -> bool:
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, group="batch", resource="jobs", namespace=NS
                )
            )
        )
        return (
            client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed
        )

    assert allowed("create")
    kube_cluster.deny("create", "jobs", group="batch")
    assert not allowed("create") and allowed("list")
    with pytest.raises(client.ApiException) as forbidden:
        batch.create_namespaced_job(NS, client.V1Job(metadata=client.V1ObjectMeta(name="x")))
    assert forbidden.value.status == 403
    assert json.loads(forbidden.value.body)["reason"] == "Forbidden"


# --- Jobs whose pods run in podman ----------------------------------------------------------

# Prints "ready" once SIGTERM is handled; on SIGTERM writes it to the termination log, exits 143.
TRAPS_SIGTERM = (
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    open('/dev/termination-log', 'w').write('got SIGTERM')\n"
    "    sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)


def _job(
    name: str,
    image: str,
    script: str,
    *,
    env: list[dict] | None = None,
    limits: dict[str, str] | None = None,
    **spec,
) -> dict:
    """A Job of one `python3 -c script` pod (a dict body: the client validates it into a
    V1Job)."""
    container = {"name": "main", "image": image, "command": ["python3", "-c", script]}
    if env:
        container["env"] = env
    if limits:
        container["resources"] = {"limits": limits}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            **spec,
        },
    }


def _condition(batch, name: str, type_: str):
    """The Job once it has condition `type_` True."""

    def found():
        job = batch.read_namespaced_job(name, NS)
        for cond in job.status.conditions or []:
            if cond.type == type_ and cond.status == "True":
                return job
        return None

    return wait_until(found, timeout=60, what=f"job {name} {type_}")


def _only_pod(core, job_name: str):
    (pod,) = core.list_namespaced_pod(NS, label_selector=f"job-name={job_name}").items
    return pod


def _podman(*args: str) -> str:
    from apps.providers.backends.local import container_runtime

    result = container_runtime("podman").cli(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_job_completes_with_its_termination_message(batch, core, podman_image):
    script = "print(1); open('/dev/termination-log', 'w').write('all done')"
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="hello"),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="main", image=podman_image, command=["python3", "-c", script]
                        )
                    ],
                )
            ),
        ),
    )
    created = batch.create_namespaced_job(NS, job)
    assert created.spec.template.metadata.labels["job-name"] == "hello"

    done = _condition(batch, "hello", "Complete")
    assert done.status.succeeded == 1 and done.status.active is None
    pod = _only_pod(core, "hello")
    assert pod.status.phase == "Succeeded"
    assert pod.metadata.name.startswith("hello-") and len(pod.metadata.name) == len("hello-") + 5
    assert pod.metadata.owner_references[0].uid == created.metadata.uid
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert terminated.message == "all done"
    assert core.read_namespaced_pod_log(pod.metadata.name, NS) == "1\n"


def test_a_failing_pod_fails_the_job_with_its_exit_code(batch, core, podman_image):
    batch.create_namespaced_job(NS, _job("three", podman_image, "import sys; sys.exit(3)"))

    failed = _condition(batch, "three", "Failed")
    reasons = {c.type: c.reason for c in failed.status.conditions}
    assert reasons == {"FailureTarget": "BackoffLimitExceeded", "Failed": "BackoffLimitExceeded"}
    assert failed.status.failed == 1
    pod = _only_pod(core, "three")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_a_secret_reaches_the_env_by_name_never_in_argv(batch, core, podman_image):
    core.create_namespaced_secret(NS, _secret("creds", token="hunter2-secret"))
    script = "import os; open('/dev/termination-log', 'w').write(os.environ['TOKEN'])"
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    batch.create_namespaced_job(NS, _job("envy", podman_image, script, env=env))

    _condition(batch, "envy", "Complete")
    pod = _only_pod(core, "envy")
    assert pod.status.container_statuses[0].state.terminated.message == "hunter2-secret"
    container = f"k8s-{NS}-{pod.metadata.name}"
    inspected = json.loads(_podman("container", "inspect", container))[0]
    assert "hunter2-secret" not in json.dumps(inspected["Args"])
    assert "hunter2-secret" not in json.dumps(inspected["Config"].get("CreateCommand"))


def test_a_missing_secret_is_a_config_error_until_it_exists(batch, core, podman_image):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    batch.create_namespaced_job(NS, _job("patient", podman_image, "pass", env=env))

    def waiting():
        pods = core.list_namespaced_pod(NS, label_selector="job-name=patient").items
        statuses = pods and pods[0].status.container_statuses
        return statuses and statuses[0].state.waiting

    waited = wait_until(
        lambda: (w := waiting()) and w.reason == "CreateContainerConfigError" and w,
        what="CreateContainerConfigError",
    )
    assert waited.message == 'secret "later" not found'
    core.create_namespaced_secret(NS, _secret("later", token="now"))
    _condition(batch, "patient", "Complete")


def test_a_pod_asking_more_gpus_than_the_node_has_stays_pending(
    batch, core, kube_cluster, podman_image
):
    job = _job("greedy", podman_image, "pass", limits={"nvidia.com/gpu": "3"})
    batch.create_namespaced_job(NS, job)

    message = (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod."
    )

    def unschedulable():
        pods = core.list_namespaced_pod(NS, label_selector="job-name=greedy").items
        for cond in (pods and pods[0].status.conditions) or []:
            if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                return pods[0], cond
        return None

    pod, cond = wait_until(unschedulable, what="an unschedulable pod")
    assert (pod.status.phase, cond.status, cond.message) == ("Pending", "False", message)
    assert pod.spec.node_name is None
    events = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod.metadata.name}"
    ).items
    assert [(e.reason, e.type, e.message) for e in events] == [
        ("FailedScheduling", "Warning", message)
    ]
    kube_cluster.set_node_gpus("gpu-node-1", 4)  # the scheduler tries again
    _condition(batch, "greedy", "Complete")


def test_taints_and_selectors_in_the_schedulers_words(batch, kube_cluster, podman_image):
    kube_cluster.taint("gpu-node-1", "dedicated", "infra")
    kube_cluster.add_node("cpu-node-1", gpus=0)
    job = _job("picky", podman_image, "pass")
    job["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    batch.create_namespaced_job(NS, job)

    def message():
        pod = kube_cluster.pod_of("picky")
        for cond in (pod and pod["status"].get("conditions")) or []:
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return cond["message"]
        return None

    assert wait_until(message, what="unschedulable") == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 "
        "node(s) had untolerated taint {dedicated: infra}. preemption: 0/2 nodes are "
        "available: 2 Preemption is not helpful for scheduling."
    )


def test_a_suspended_job_makes_no_pod_until_admitted(batch, core, kube_cluster, podman_image):
    batch.create_namespaced_job(NS, _job("queued", podman_image, "pass", suspend=True))

    suspended = _condition(batch, "queued", "Suspended")
    assert suspended.status.conditions[0].reason == "JobSuspended"
    assert core.list_namespaced_pod(NS).items == []
    kube_cluster.admit("queued")
    done = _condition(batch, "queued", "Complete")
    assert {c.type: (c.status, c.reason) for c in done.status.conditions}["Suspended"] == (
        "False",
        "JobResumed",
    )


def test_a_disruption_fails_the_job_by_its_pod_failure_policy(
    batch, core, kube_cluster, podman_image
):
    policy = {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    batch.create_namespaced_job(
        NS, _job("preempted", podman_image, TRAPS_SIGTERM, podFailurePolicy=policy)
    )
    pod = wait_until(lambda: kube_cluster.pod_of("preempted"), what="a pod")
    name = pod["metadata"]["name"]
    wait_until(lambda: "ready" in _log(core, name), what="the SIGTERM trap")
    # A finalizer of the test's keeps the pod readable after the kubelet is done with it.
    core.patch_namespaced_pod(
        name, NS, {"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking", "test/keep"]}}
    )

    kube_cluster.disrupt("preempted")

    failed = _condition(batch, "preempted", "Failed")
    reasons = {c.type: (c.reason, c.message) for c in failed.status.conditions}
    expected = (
        "PodFailurePolicy",
        f"Pod {NS}/{name} has condition DisruptionTarget matching FailJob rule at index 0",
    )
    assert reasons["Failed"] == expected and reasons["FailureTarget"] == expected
    pod = core.read_namespaced_pod(name, NS)
    assert pod.metadata.deletion_timestamp is not None and pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (143, "got SIGTERM")
    assert {c.type: c.reason for c in pod.status.conditions}["DisruptionTarget"] == (
        "PreemptionByScheduler"
    )
    core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": None}})
    wait_until(lambda: not core.list_namespaced_pod(NS).items, what="the pod gone")


def _log(core, pod_name: str) -> str:
    try:
        return core.read_namespaced_pod_log(pod_name, NS)
    except client.ApiException:
        return ""  # not started yet


def test_a_killed_container_is_an_error_137(batch, core, kube_cluster, podman_image):
    batch.create_namespaced_job(NS, _job("crashy", podman_image, TRAPS_SIGTERM))
    pod = wait_until(lambda: kube_cluster.pod_of("crashy"), what="a pod")
    wait_until(lambda: "ready" in _log(core, pod["metadata"]["name"]), what="running")

    kube_cluster.kill_container("crashy")

    _condition(batch, "crashy", "Failed")
    terminated = _only_pod(core, "crashy").status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "Error")


def test_a_foreground_delete_takes_the_pods_containers_and_owned_secret(
    batch, core, kube_cluster, podman_image
):
    created = batch.create_namespaced_job(NS, _job("doomed", podman_image, TRAPS_SIGTERM))
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "doomed",
        "uid": created.metadata.uid,
        "controller": False,
    }
    secret = _secret("doomed-env", token="x")
    secret.metadata.owner_references = [owner]
    core.create_namespaced_secret(NS, secret)
    pod = wait_until(lambda: kube_cluster.pod_of("doomed"), what="a pod")
    wait_until(lambda: "ready" in _log(core, pod["metadata"]["name"]), what="running")
    uid = pod["metadata"]["uid"]
    assert _podman("ps", "--all", "--quiet", "--filter", f"label=io.kubernetes.pod.uid={uid}")

    answer = batch.delete_namespaced_job("doomed", NS, propagation_policy="Foreground")

    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert answer["metadata"]["deletionTimestamp"]

    def gone():
        return not (
            kube_cluster.objects("jobs")
            or kube_cluster.objects("pods")
            or kube_cluster.objects("secrets")
        )

    wait_until(gone, what="the job, its pod and its secret gone")
    wait_until(
        lambda: (
            not _podman("ps", "--all", "--quiet", "--filter", f"label=io.kubernetes.pod.uid={uid}")
        ),
        what="the container removed",
    )


def test_a_missing_image_is_err_image_pull_then_back_off(batch, core, kube_cluster):
    # A "registry" that answers plain HTTP: podman's pull fails at once (a refused
    # connection would be retried for seconds).
    image = f"{kube_cluster.url.removeprefix('http://')}/trainyard/missing:1"
    batch.create_namespaced_job(NS, _job("nothing", image, "pass"))

    seen = set()

    def backing_off():
        pod = kube_cluster.pod_of("nothing")
        statuses = pod and pod["status"].get("containerStatuses")
        waiting = statuses and statuses[0]["state"].get("waiting")
        if waiting:
            seen.add(waiting["reason"])
        return waiting if waiting and waiting["reason"] == "ImagePullBackOff" else None

    waiting = wait_until(backing_off, timeout=60, what="ImagePullBackOff")
    assert "ErrImagePull" in seen
    assert waiting["message"].startswith(f'Back-off pulling image "{image}": ErrImagePull: ')
    assert _only_pod(core, "nothing").status.phase == "Pending"


def test_a_job_deleted_without_a_policy_orphans_its_pod(batch, core, kube_cluster, podman_image):
    """batch/v1's default: a plain delete of a Job leaves its pods (unowned)."""
    job = _job("leaver", podman_image, "pass", limits={"nvidia.com/gpu": "3"})  # never runs
    batch.create_namespaced_job(NS, job)
    wait_until(lambda: kube_cluster.pod_of("leaver"), what="a pod")

    batch.delete_namespaced_job("leaver", NS)

    assert kube_cluster.objects("jobs") == []
    (pod,) = kube_cluster.objects("pods")
    assert "ownerReferences" not in pod["metadata"]
    core.delete_namespaced_pod(pod["metadata"]["name"], NS)
    wait_until(lambda: not kube_cluster.objects("pods"), what="the unscheduled pod gone")
