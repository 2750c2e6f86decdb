"""The `kube_cluster` fixture: one emulated Kubernetes cluster per test process (each
pytest-xdist worker has its own), started the first time a test asks for it and reset
after every test that used it. Registered for the whole suite by tests/conftest.py.

The cluster (`EmulatedCluster`): namespace `trainyard`, one node `gpu-node-1` (cpu 8,
memory 32Gi, nvidia.com/gpu 2, label nvidia.com/gpu.present=true), an API server on a free
port of 127.0.0.1 (`url`, plain http) that wants `token`, and `kubeconfig_yaml` for the
official client. Hooks stand for what a test cannot do through the API: `disrupt` (a
preemption), `kill_container` (a crash), `admit` (Kueue's admission), `set_node_gpus`,
`add_node`, `taint`, `deny` (a missing RBAC right), `objects`, `pod_of` and `requests`
(what the API holds and was asked), `errors` (the controller thread's own failures: a test
during which there were any fails at teardown). Pods run as podman containers labelled
`trainyard.kube-emulator=<the cluster's id>`, all removed by `reset` and at the session's
end (and, at the next start, those of a test process that died before its teardown).
"""

from __future__ import annotations

import copy
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.providers.kube.apiserver import (
    RESOURCES,
    ApiServer,
    Obj,
    Request,
    Store,
    controller_uid,
    default_node,
    terminal,
)

NAMESPACE = "trainyard"
NODE = "gpu-node-1"


class EmulatedCluster:
    """An API server and its controller thread (job controller, scheduler, garbage
    collector and kubelet). `start`, `reset`, `stop`; the test hooks below."""

    def __init__(self, namespace: str = NAMESPACE, *, kubelet: bool = True) -> None:
        self.namespace = namespace
        self.id = uuid.uuid4().hex[:12]
        self.store = Store((namespace,))
        self.server = ApiServer(self.store, user=f"system:serviceaccount:{namespace}:trainyard")
        self.controller = None
        if kubelet:
            from tests.providers.kube.kubelet import Controller

            self.controller = Controller(self.store, cluster_id=self.id)

    # -- what a client needs --

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def kubeconfig_yaml(self) -> str:
        """A complete kubeconfig: cluster `emulated` at `url`, a user with `token`, context
        `emulated` (namespace `namespace`), the current one."""
        return textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Config
            clusters:
            - name: emulated
              cluster:
                server: {self.url}
            users:
            - name: emulated
              user:
                token: {self.token}
            contexts:
            - name: emulated
              context:
                cluster: emulated
                user: emulated
                namespace: {self.namespace}
            current-context: emulated
            """
        )

    # -- life cycle --

    def start(self) -> EmulatedCluster:
        self.server.start()
        if self.controller is not None:
            self.controller.start()
        return self

    def reset(self) -> None:
        """Back to the default cluster: no objects, one node, nothing denied, an empty
        request log, every container of this cluster removed."""
        if self.controller is None:
            self.store.reset((self.namespace,))
            return
        with self.controller.paused():
            self.store.reset((self.namespace,))
            self.controller.reset()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        self.server.stop()

    def errors(self) -> list[str]:
        """What went wrong in the controller thread since the last reset (emulator bugs)."""
        return list(self.controller.errors) if self.controller is not None else []

    # -- test hooks --

    def objects(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Deep copies of the stored objects of `kind` (configmaps, secrets, jobs, pods,
        events, nodes), in `namespace` (the cluster's when None)."""
        namespace = namespace or self.namespace
        with self.store.lock:
            if kind == "nodes":
                return copy.deepcopy(list(self.store.nodes.values()))
            if kind not in RESOURCES:
                raise KeyError(f"unknown kind {kind!r}: one of {sorted(RESOURCES)} or nodes")
            found = self.store.items(kind, namespace)
            return copy.deepcopy(sorted(found, key=lambda o: o["metadata"]["name"]))

    def requests(self) -> list[Request]:
        """Every request the API server answered since the last reset, in order:
        (method, path, query)."""
        with self.store.lock:
            return list(self.store.request_log)

    def deny(self, verb: str, resource: str, group: str = "") -> None:
        """Take a right away: requests with this (verb, group, resource) are Forbidden and
        a SelfSubjectAccessReview for it answers allowed: false. `*` matches any."""
        with self.store.lock:
            self.store.deny_set.add((verb, group, resource))

    def admit(self, job_name: str, namespace: str | None = None) -> None:
        """Unsuspend a Job, as Kueue does when it admits one."""
        with self.store.lock:
            job = self._job(job_name, namespace)
            if job["spec"].get("suspend"):
                job["spec"]["suspend"] = False
                job["metadata"]["generation"] = job["metadata"].get("generation", 1) + 1
                self.store.put("jobs", job)

    def pod_of(self, job_name: str, namespace: str | None = None) -> Obj | None:
        """A copy of the Job's newest pod not yet finished, else its newest pod; None if
        it has none."""
        with self.store.lock:
            job = self._job(job_name, namespace)
            pods = [
                p
                for p in self.store.items("pods", job["metadata"]["namespace"])
                if controller_uid(p) == job["metadata"]["uid"]
            ]
            pods.sort(key=lambda p: (not terminal(p), int(p["metadata"]["resourceVersion"])))
            return copy.deepcopy(pods[-1]) if pods else None

    def disrupt(
        self,
        job_name: str,
        reason: str = "PreemptionByScheduler",
        message: str = "Kubernetes: preempting to accommodate a higher priority pod",
        namespace: str | None = None,
    ) -> None:
        """What a preemption does to the Job's pod: condition DisruptionTarget True, then
        a delete with the pod's grace (its container gets SIGTERM, then SIGKILL)."""
        from tests.providers.kube.apiserver import timestamp

        with self.store.lock:
            pod = self.pod_of(job_name, namespace)
            if pod is None:
                raise LookupError(f"job {job_name} has no pod to disrupt")
            conditions = [
                c for c in pod["status"].get("conditions", []) if c["type"] != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": timestamp(),
                }
            )
            pod["status"]["conditions"] = conditions
            stored = self.store.put("pods", pod)
            self.store.delete_object("pods", stored)

    def kill_container(self, job_name: str, namespace: str | None = None) -> None:
        """SIGKILL the Job's pod's container, as a crash would (exit 137, reason Error)."""
        pod = self.pod_of(job_name, namespace)
        if pod is None:
            raise LookupError(f"job {job_name} has no pod")
        self._kubelet().kill(pod)

    def set_node_gpus(self, node: str, count: int) -> None:
        """The node's nvidia.com/gpu capacity and allocatable."""
        with self.store.lock:
            obj = copy.deepcopy(self.store.nodes[node])
            for field in ("capacity", "allocatable"):
                obj["status"][field]["nvidia.com/gpu"] = str(count)
            self._put_node(obj)

    def add_node(self, name: str, gpus: int = 2, labels: dict[str, str] | None = None) -> None:
        """Another node (cpu 8, memory 32Gi, `gpus` nvidia.com/gpu); its pods run here too."""
        with self.store.lock:
            self._put_node(default_node(name, gpus, labels))

    def taint(
        self, node: str, key: str, value: str | None = None, effect: str = "NoSchedule"
    ) -> None:
        with self.store.lock:
            obj = copy.deepcopy(self.store.nodes[node])
            taint: dict[str, Any] = {"key": key, "effect": effect}
            if value is not None:
                taint["value"] = value
            obj["spec"].setdefault("taints", []).append(taint)
            self._put_node(obj)

    # -- helpers --

    def _put_node(self, node: Obj) -> None:
        node["metadata"]["resourceVersion"] = self.store.next_rv()
        self.store.nodes[node["metadata"]["name"]] = node
        self.store.changed.set()

    def _job(self, name: str, namespace: str | None) -> Obj:
        job = self.store.lookup("jobs", namespace or self.namespace, name)
        if job is None:
            raise LookupError(f"no job {name}")
        return copy.deepcopy(job)

    def _kubelet(self) -> Any:
        if self.controller is None:
            raise RuntimeError("this cluster has no kubelet")
        return self.controller.kubelet


@pytest.fixture(scope="session")
def _kube_cluster_session() -> Iterator[EmulatedCluster]:
    cluster = EmulatedCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kube_cluster(_kube_cluster_session: EmulatedCluster) -> Iterator[EmulatedCluster]:
    """This process's emulated cluster, reset after the test (module docstring). A test
    during which the emulator's own thread failed fails at teardown with its errors."""
    yield _kube_cluster_session
    errors = list(_kube_cluster_session.errors())
    _kube_cluster_session.reset()
    if errors:
        pytest.fail("the emulated cluster failed: " + "; ".join(errors))
