"""The kubernetes provider: each attempt is one `batch/v1` Job on a Kubernetes cluster,
driven through the official client (`kubernetes`, imported only by a process that uses this
kind). What the Job, its token Secret and the runner's ConfigMap are made of, and how a
Job's state is read, is in `kube_manifests`; this module talks to the cluster.

Tested against an emulated API server whose pods run as real podman containers
(tests/providers/kube/), not yet against a real cluster in CI: docs/kubernetes.md says what
was tested against what, and how to run the same contract against a cluster of your own.

Credentials (write-only, encrypted): `kubeconfig`, the kubeconfig's text. Config keys:
- `context`: the kubeconfig context (default: its current context).
- `namespace` (default `default`): where Jobs, Secrets and the runner ConfigMap go.
- `accelerator`: the catalog accelerator the cluster's GPU nodes have (default `cpu`);
  `gpu_resource` the extended resource that counts them (default `nvidia.com/gpu`);
  `gpu_counts` the GPUs per job offered (default: 1, 2, 4, 8 up to the biggest node's).
  `slots`: the capacity offered for `cpu` (default: the nodes' allocatable CPUs).
- `node_selector` (a mapping), `tolerations` (a list of Kubernetes tolerations),
  `image_pull_secrets` (Secret names), `service_account`, `priority_class`,
  `runtime_class`, `image_pull_policy`: copied into every pod.
- `cpu`, `memory` (requests), `memory_limit`, `shm_size` (the `/dev/shm` memory volume,
  default 1Gi).
- `kueue_queue`: a Kueue LocalQueue; Jobs are created suspended with its label and run when
  Kueue admits them (until then the attempt is `queued`, unbilled).
- `control_url`: where pods reach the control plane, when that differs from
  TRAINYARD_PUBLIC_URL (an in-cluster Service name, say). `relay_url`: as for other kinds.
- `termination_grace_s`: the pods' terminationGracePeriodSeconds (default
  TERMINATE_GRACE_S, rounded up).
- `ttl_seconds_after_finished`: how long the cluster keeps a finished Job that was never
  released (default one day).
- `network_policy` (default true): keep a NetworkPolicy in the namespace under which nothing
  may connect to a workload's pod (another organization's workload included);
  `egress_except_cidrs` adds that their traffic out goes anywhere but those ranges (the
  cluster's own, say), DNS aside. False where the operator manages the namespace's policies.

The reconcile pass polls every live attempt of a provider with two list calls per
namespace (Jobs and pods, by a label selector naming the attempts), never one per attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from apps.providers.backends import kube_manifests as manifests
from apps.providers.backends.base import (
    Backend,
    BackendError,
    Bootstrap,
    Handle,
    LaunchRequest,
    OfferInfo,
    PermanentBackendError,
    PollOutcome,
    PollResult,
    RetryableBackendError,
    failed_poll,
)
from apps.providers.backends.bundle import bundle_sha256, runner_bundle

# Connect and read timeouts of every call to the API server.
TIMEOUT = (5, 30)
# Attempts named in one label selector (the URL stays short).
SELECTOR_BATCH = 100
# What the provider's identity must be allowed to do: (verb, API group, resource,
# namespaced). `check` asks the cluster (SelfSubjectAccessReview) about each.
NEEDED_RIGHTS = (
    ("create", "batch", "jobs", True),
    ("get", "batch", "jobs", True),
    ("list", "batch", "jobs", True),
    ("delete", "batch", "jobs", True),
    ("create", "", "secrets", True),
    ("patch", "", "secrets", True),
    ("delete", "", "secrets", True),
    ("create", "", "configmaps", True),
    ("get", "", "configmaps", True),
    ("list", "", "pods", True),
    ("delete", "", "pods", True),
    ("list", "", "events", True),
    ("list", "", "nodes", False),
)
NETWORK_POLICY_RIGHT = ("create", "networking.k8s.io", "networkpolicies", True)
DEFAULT_GPU_COUNTS = (1, 2, 4, 8)

_clients: dict[str, k8s.ApiClient] = {}
_clients_lock = threading.Lock()


class KubernetesBackend(Backend):
    kind = "kubernetes"
    ALLOCATES_AT_LAUNCH = False  # a pod waits for a node (or for Kueue): billed once it runs
    ASSIGNS_GPU_DEVICES = False  # the device plugin gives each pod its GPUs

    @classmethod
    def where_it_runs(cls, handle: Handle) -> str:
        namespace, name = handle.get("namespace"), handle.get("job")
        return f"as Kubernetes Job {namespace}/{name}" if namespace and name else ""

    # -- the connection ----------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return manifests.namespace_of(self.config)

    def api(self) -> k8s.ApiClient:
        """A client for the kubeconfig's cluster and context, one per process and kubeconfig
        (its connection pool is reused across passes)."""
        kubeconfig = self.credentials.get("kubeconfig") or ""
        context = str(self.config.get("context") or "")
        if not kubeconfig.strip():
            raise PermanentBackendError("kubernetes: no kubeconfig is stored for this provider")
        key = hashlib.sha256(f"{context}\0{kubeconfig}".encode()).hexdigest()
        with _clients_lock:
            api = _clients.get(key)
            if api is None:
                try:
                    loaded = yaml.safe_load(kubeconfig)
                    if not isinstance(loaded, dict):
                        raise ValueError("not a mapping")
                    api = k8s_config.new_client_from_config_dict(loaded, context=context or None)
                except Exception as exc:  # the kubeconfig's own words say what is wrong
                    raise PermanentBackendError(
                        f"kubernetes: the kubeconfig cannot be used: {exc}"
                    ) from exc
                _clients[key] = api
        return api

    def _call(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`call` on the API server, its JSON answer as plain data. A connection failure or
        a 429/5xx is retryable; any other refusal is permanent, in the server's words."""
        try:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
        except ApiException as exc:
            raise _api_error(what, exc) from exc
        except (HTTPError, OSError) as exc:
            raise RetryableBackendError(
                f"kubernetes: {what}: cannot reach the cluster: {exc}"
            ) from exc
        data = response.data
        return json.loads(data) if data else {}

    def _batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.api())

    def _core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api())

    # -- launch --------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        """Create the attempt's token Secret and Job, or return the Job it already has. Four
        racing launches make one Job: the cluster refuses the others' (409), and they answer
        the same handle."""
        namespace = self.namespace
        name = manifests.job_name(request.job_id, request.attempt)
        handle = {"namespace": namespace, "job": name}
        if self._read_job(name) is not None:
            return handle
        self._publish_runner()
        self._isolate_network()
        labels = manifests.attempt_labels(request, name)
        secret = manifests.token_secret(namespace, name, bootstrap.token, labels)
        try:
            self._call(
                "create the token Secret", self._core().create_namespaced_secret, namespace, secret
            )
        except _AlreadyThere:
            self._call(
                "replace the token Secret",
                self._core().replace_namespaced_secret,
                manifests.token_secret_name(name),
                namespace,
                secret,
            )
        body = manifests.job_manifest(
            config=self.config,
            request=request,
            control_url=str(self.config.get("control_url") or bootstrap.control_url),
            runner_sha256=bundle_sha256(),
            grace_s=self._grace_s(),
        )
        try:
            job = self._call("create the Job", self._batch().create_namespaced_job, namespace, body)
        except _AlreadyThere:
            return handle  # a racing launch made it
        # The Secret goes with its Job; `release` deletes it too, should this patch not land.
        self._call(
            "give the token Secret to its Job",
            self._core().patch_namespaced_secret,
            manifests.token_secret_name(name),
            namespace,
            manifests.owned_by(job),
        )
        return handle

    def _grace_s(self) -> float:
        configured = self.config.get("termination_grace_s")
        return float(configured) if configured is not None else float(settings.TERMINATE_GRACE_S)

    def _publish_runner(self) -> None:
        """The runner's ConfigMap for this control plane's runner (immutable: its name is
        its digest). Created at every launch, the cluster's 409 meaning it is there: one
        call, and a ConfigMap an operator deleted comes back."""
        body = manifests.runner_configmap(self.namespace, bundle_sha256(), runner_bundle())
        with contextlib.suppress(_AlreadyThere):
            self._call(
                "publish the runner",
                self._core().create_namespaced_config_map,
                self.namespace,
                body,
            )

    @property
    def _network_policy(self) -> bool:
        return self.config.get("network_policy", True) is not False

    def _isolate_network(self) -> None:
        """The namespace's NetworkPolicy for Trainyard's pods (`network_policy`), created at
        every launch as the runner's ConfigMap is; one the operator changed is left as is."""
        if not self._network_policy:
            return
        body = manifests.network_policy(
            self.namespace, list(self.config.get("egress_except_cidrs") or ())
        )
        with contextlib.suppress(_AlreadyThere):
            self._call(
                "create the workloads' NetworkPolicy",
                k8s.NetworkingV1Api(self.api()).create_namespaced_network_policy,
                self.namespace,
                body,
            )

    def _read_job(self, name: str) -> dict[str, Any] | None:
        try:
            return self._call(
                "read the Job", self._batch().read_namespaced_job, name, self.namespace
            )
        except _NotThere:
            return None

    # -- poll ----------------------------------------------------------------------------------

    def poll(self, handle: Handle) -> PollResult:
        return self._poll_group([handle])[0]  # type: ignore[return-value]

    def poll_many(self, handles: Sequence[Handle]) -> list[PollOutcome]:
        """Two list calls per namespace (its attempts' Jobs and pods) for all `handles`; a
        handle that names no Job gets its own error."""
        outcomes: list[PollOutcome | None] = [None] * len(handles)
        by_namespace: dict[str, list[int]] = defaultdict(list)
        for index, handle in enumerate(handles):
            if isinstance(handle, dict) and handle.get("namespace") and handle.get("job"):
                by_namespace[str(handle["namespace"])].append(index)
            else:
                outcomes[index] = failed_poll(KeyError("the handle names no Kubernetes Job"))
        for namespace, indices in by_namespace.items():
            for start in range(0, len(indices), SELECTOR_BATCH):
                batch = indices[start : start + SELECTOR_BATCH]
                results = self._poll_group([handles[i] for i in batch], namespace=namespace)
                for index, result in zip(batch, results, strict=True):
                    outcomes[index] = result
        return [outcome for outcome in outcomes if outcome is not None]

    def _poll_group(
        self, handles: Sequence[Handle], *, namespace: str | None = None
    ) -> list[PollOutcome]:
        namespace = namespace or str(handles[0].get("namespace") or self.namespace)
        names = sorted({str(handle["job"]) for handle in handles})
        selector = f"{manifests.ATTEMPT_LABEL} in ({','.join(names)})"
        jobs = self._call(
            "list the Jobs", self._batch().list_namespaced_job, namespace, label_selector=selector
        )
        pods = self._call(
            "list the pods", self._core().list_namespaced_pod, namespace, label_selector=selector
        )
        job_by_name = {item["metadata"]["name"]: item for item in jobs.get("items") or []}
        pods_by_job: dict[str, list[dict]] = defaultdict(list)
        for pod in pods.get("items") or []:
            label = (pod.get("metadata", {}).get("labels") or {}).get(manifests.ATTEMPT_LABEL)
            pods_by_job[str(label)].append(pod)
        queue = str(self.config.get("kueue_queue") or "")
        return [
            manifests.attempt_state(
                job_by_name.get(handle["job"]), pods_by_job.get(handle["job"], []), queue=queue
            )
            for handle in handles
        ]

    # -- terminate and release ---------------------------------------------------------------

    def terminate(self, handle: Handle, grace_s: float) -> None:
        """Delete the Job in the foreground, and its pods with `grace_s` (a Job's dependents
        otherwise get their own terminationGracePeriodSeconds): SIGTERM now, SIGKILL after
        the grace, and the Job goes once its pod has. Returns at once; safe when gone."""
        # The pods first: a pod already being deleted keeps the grace it was deleted with,
        # and the Job's garbage collection would give it the pod's own.
        self._delete_pods(handle, grace_s=grace_s)
        self._delete_job(handle, grace_s=grace_s, propagation="Foreground")

    def release(self, handle: Handle) -> None:
        """Delete the Job, its pods (at once) and its token Secret; safe when they are gone."""
        self._delete_pods(handle, grace_s=0)  # first, as in `terminate`
        self._delete_job(handle, grace_s=0, propagation="Background")
        with contextlib.suppress(_NotThere):
            self._call(
                "delete the token Secret",
                self._core().delete_namespaced_secret,
                manifests.token_secret_name(str(handle["job"])),
                str(handle["namespace"]),
            )

    def _pods_of(self, handle: Handle) -> list[dict[str, Any]]:
        """The attempt's pods, as the cluster lists them."""
        listed = self._call(
            "list the pods",
            self._core().list_namespaced_pod,
            str(handle["namespace"]),
            label_selector=f"{manifests.ATTEMPT_LABEL}={handle['job']}",
        )
        return listed.get("items") or []

    def _delete_pods(self, handle: Handle, *, grace_s: float) -> None:
        namespace = str(handle["namespace"])
        for pod in self._pods_of(handle):
            with contextlib.suppress(_NotThere):
                self._call(
                    "delete a pod",
                    self._core().delete_namespaced_pod,
                    pod["metadata"]["name"],
                    namespace,
                    grace_period_seconds=max(0, math.ceil(grace_s)),
                )

    def _delete_job(self, handle: Handle, *, grace_s: float, propagation: str) -> None:
        with contextlib.suppress(_NotThere):
            self._call(
                "delete the Job",
                self._batch().delete_namespaced_job,
                str(handle["job"]),
                str(handle["namespace"]),
                grace_period_seconds=max(0, math.ceil(grace_s)),
                propagation_policy=propagation,
            )

    # -- what the cluster offers -----------------------------------------------------------

    def offers(self) -> list[OfferInfo]:
        """One offer from the nodes' allocatable GPUs (those matching `node_selector`), or
        their CPUs for `cpu`, unless `slots` says the capacity."""
        accelerator = str(self.config.get("accelerator") or "cpu")
        nodes = self._nodes()
        if accelerator == "cpu":
            slots = self.config.get("slots")
            if slots is None:
                slots = sum(_quantity(node, "cpu") for node in nodes)
            counts = [int(c) for c in self.config.get("gpu_counts") or [1]]
            return [OfferInfo(accelerator="cpu", gpu_counts=counts, capacity=int(slots))]
        resource = manifests.gpu_resource(self.config)
        per_node = [_quantity(node, resource) for node in nodes]
        total = sum(per_node)
        if total <= 0:
            raise PermanentBackendError(
                f"kubernetes: no schedulable node has allocatable {resource}"
                + (" matching node_selector" if self.config.get("node_selector") else "")
            )
        biggest = max(per_node)
        counts = self.config.get("gpu_counts") or [c for c in DEFAULT_GPU_COUNTS if c <= biggest]
        return [
            OfferInfo(accelerator=accelerator, gpu_counts=[int(c) for c in counts], capacity=total)
        ]

    def _nodes(self) -> list[dict[str, Any]]:
        wanted = {str(k): str(v) for k, v in dict(self.config.get("node_selector") or {}).items()}
        listed = self._call("list the nodes", self._core().list_node)
        return [
            node
            for node in listed.get("items") or []
            if not (node.get("spec") or {}).get("unschedulable")
            and wanted.items() <= (node.get("metadata", {}).get("labels") or {}).items()
        ]

    def check(self) -> list[str]:
        """The API server answers, the namespace exists, and the identity may do what the
        backend does there (SelfSubjectAccessReview); raises naming what is missing."""
        version = self._call("read the version", k8s.VersionApi(self.api()).get_code)
        try:
            self._call("read the namespace", self._core().read_namespace, self.namespace)
        except _NotThere as exc:
            raise PermanentBackendError(
                f"kubernetes: the namespace {self.namespace!r} does not exist"
            ) from exc
        rights = [*NEEDED_RIGHTS, *([NETWORK_POLICY_RIGHT] if self._network_policy else [])]
        missing = [
            f"{verb} {resource}{'.' + group if group else ''}"
            for verb, group, resource, namespaced in rights
            if not self._allowed(verb, group, resource, namespaced)
        ]
        if missing:
            raise PermanentBackendError(
                f"kubernetes: the kubeconfig's identity may not {', '.join(missing)} "
                f"in namespace {self.namespace}"
            )
        lines = [
            f"Kubernetes {version.get('gitVersion', '?')} at {self.api().configuration.host}",
            f"namespace {self.namespace}: every right the backend needs",
        ]
        for offer in self.offers():
            lines.append(f"{offer.accelerator}: capacity {offer.capacity}")
        return lines

    def _allowed(self, verb: str, group: str, resource: str, namespaced: bool) -> bool:
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespaced:
            attributes["namespace"] = self.namespace
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = self._call(
            "review the rights",
            k8s.AuthorizationV1Api(self.api()).create_self_subject_access_review,
            review,
        )
        return bool((answer.get("status") or {}).get("allowed"))

    def diagnostics(self, handle: Handle) -> list[str]:
        """The pod's waiting reasons and the cluster's warning events about the Job and its
        pod (FailedScheduling, Failed pulls, evictions). Never raises."""
        try:
            namespace, name = str(handle["namespace"]), str(handle["job"])
            pods = self._pods_of(handle)
            lines: list[str] = []
            subjects = [name] + [pod["metadata"]["name"] for pod in pods]
            for pod in pods:
                lines += manifests.waiting_lines(pod)
            for subject in subjects:
                events = (
                    self._call(
                        "list the events",
                        self._core().list_namespaced_event,
                        namespace,
                        field_selector=f"involvedObject.name={subject}",
                    ).get("items")
                    or []
                )
                for event in events:
                    if event.get("type") == "Warning" or event.get("reason") in (
                        "Evicted",
                        "Preempted",
                    ):
                        lines.append(f"{subject}: {event.get('reason')}: {event.get('message')}")
            return list(dict.fromkeys(lines))
        except Exception:  # diagnostics explain a failure, they are not one
            return []


class _AlreadyThere(PermanentBackendError):
    """409 AlreadyExists."""


class _NotThere(PermanentBackendError):
    """404 NotFound."""


def _api_error(what: str, exc: ApiException) -> BackendError:
    message = exc.reason or ""
    try:
        body = json.loads(exc.body or "{}")
        message = body.get("message") or message
    except (TypeError, ValueError):
        pass
    text = f"kubernetes: {what}: {exc.status} {message}".strip()
    if exc.status == 409:
        return _AlreadyThere(text)
    if exc.status == 404:
        return _NotThere(text)
    if exc.status in (429, 500, 502, 503, 504) or not exc.status:
        return RetryableBackendError(text)
    return PermanentBackendError(text)


def _quantity(node: dict[str, Any], resource: str) -> int:
    """A node's allocatable `resource` as a whole number (CPUs in cores; "500m" is 0)."""
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(resource) or "0")
    try:
        return int(raw[:-1]) // 1000 if raw.endswith("m") else int(float(raw))
    except ValueError:
        return 0
