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
