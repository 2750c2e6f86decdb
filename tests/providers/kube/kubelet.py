"""The emulated cluster's controllers: one thread (`Controller`) that, every tick (0.15 s,
or at once after a write), is the job controller, the scheduler, the garbage collector,
the TTL controller and the kubelet of every node, the last running each pod as a podman
container on this host (`Kubelet`; podman's slow calls happen in threads of their own, so
a pull or a graceful stop never holds up the other pods).

Job controller: a Job that is not suspended and has neither a pod that runs nor a finished
condition gets one pod from its template (`<job>-<5 random>`, the job-name and
controller-uid labels, an owner reference to the Job, the `batch.kubernetes.io/job-tracking`
finalizer, which it removes once it has counted the pod). A succeeded pod completes the
Job; a failed one counts against backoffLimit (`BackoffLimitExceeded`) unless a
podFailurePolicy rule matches first (FailJob: `PodFailurePolicy`, Ignore: not counted),
with FailureTarget then Failed, in Kubernetes 1.31's words. Without a podFailurePolicy a
pod being deleted counts as failed at once (podReplacementPolicy TerminatingOrFailed); with
one, once it is Failed. activeDeadlineSeconds (`DeadlineExceeded`), suspension
(`Suspended`, its pods deleted) and ttlSecondsAfterFinished are kept. Not emulated: several
pods at once (parallelism, completions above 1, indexed Jobs), back-off delays between
pods, successPolicy, managedBy.

Scheduler: scheduling gates (`SchedulingGated`), then the first node whose untolerated
NoSchedule/NoExecute taints, nodeSelector, required node affinity and free cpu, memory and
extended resources (allocatable minus the requests of the pods bound to it that have not
finished; requests default to limits) allow the pod, else `Unschedulable` with the real
scheduler's message and a FailedScheduling event, tried again every tick. No preemption,
priorities, pod affinity, topology spread or ports.

Kubelet: every container's image must be in podman's store or pullable (`ErrImagePull`,
then `ImagePullBackOff`; imagePullPolicy Always pulls only what is missing); env from
values, secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef and envFrom, with
$(VAR) expansion (`CreateContainerConfigError` for a missing Secret, ConfigMap or key);
configMap, secret and emptyDir volumes in a host directory (a Memory emptyDir at /dev/shm
sets its size); the termination message file; runAsUser/runAsGroup; the memory limit
(an exit 137 of a memory-limited container the emulator did not kill is `OOMKilled`, as
podman's own OOMKilled flag is not set on cgroup v1). Each pod runs only its first
container, on a slirp4netns network of its own that reaches this host's loopback at
10.0.2.2 (what a pod's way to the control plane's Service stands for), after its init
containers, each run to its end in turn (one that fails fails the pod); no sidecar
containers, probes, restarts, GPUs (counted, never given), hostPath or projected volumes.
Values of env vars reach podman by name (`--env NAME`, the value in the CLI's environment),
never in argv, except the few names podman's own environment needs (PATH, HOME,
XDG_RUNTIME_DIR), which go as NAME=value.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from apps.providers.backends.containers import (
    ContainerError,
    ContainerRuntime,
    ImageRefused,
    ImageUnavailable,
)
from tests.providers.kube.apiserver import (
    FOREGROUND_FINALIZER,
    JOB_TRACKING_FINALIZER,
    ApiError,
    Obj,
    Store,
    controller_uid,
    default_pod_spec,
    now,
    owner_uids,
    parse_quantity,
    parse_timestamp,
    random_suffix,
    terminal,
    timestamp,
)

log = logging.getLogger(__name__)

TICK_S = 0.15
PULL_TIMEOUT_S = 60.0
LABEL = "trainyard.kube-emulator"  # every container's, valued with the cluster's id
PID_LABEL = "trainyard.kube-emulator.pid"  # the test process that started it
NETWORK = "--network=slirp4netns:allow_host_loopback=true"
TERMINATION_MESSAGE_MAX = 4096
DEFAULT_SHM = "64m"
# podman's own environment (`_cli_env`): env vars of these names go in argv as NAME=value.
CLI_ENV_NAMES = ("PATH", "HOME", "XDG_RUNTIME_DIR")
POD_IP = "10.0.2.100"  # slirp4netns' address for its guest
CONFIG_RETRY_S = 0.5
PULL_BACKOFF_S = (10.0, 60.0)  # the first back-off after a failed pull, and its cap
BACKOFF_SHOWN_AFTER_S = 0.5  # ErrImagePull, then ImagePullBackOff


def _conditions(obj: Obj) -> list[Obj]:
    return obj.setdefault("status", {}).setdefault("conditions", [])


def condition(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def condition_true(obj: Obj, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    obj: Obj, type_: str, status: str, reason: str = "", message: str = "", *, probe: bool = False
) -> None:
    """Set a condition in place; its lastTransitionTime moves only when its status does."""
    conditions = _conditions(obj)
    old = condition(obj, type_)
    new: Obj = {"type": type_, "status": status}
    if probe:
        new["lastProbeTime"] = timestamp()
    new["lastTransitionTime"] = (
        old["lastTransitionTime"]
        if old is not None and old.get("status") == status and old.get("lastTransitionTime")
        else timestamp()
    )
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    if old is not None:
        if probe and {k: v for k, v in old.items() if k != "lastProbeTime"} == {
            k: v for k, v in new.items() if k != "lastProbeTime"
        }:
            return
        conditions[conditions.index(old)] = new
    else:
        conditions.append(new)


def deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _finalizers(obj: Obj) -> list[str]:
    return obj["metadata"].get("finalizers") or []


def _without_finalizer(obj: Obj, finalizer: str) -> Obj:
    obj = copy.deepcopy(obj)
    remaining = [f for f in _finalizers(obj) if f != finalizer]
    if remaining:
        obj["metadata"]["finalizers"] = remaining
    else:
        obj["metadata"].pop("finalizers", None)
    return obj


# --- the scheduler's arithmetic ----------------------------------------------------------


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """What a pod asks of a node: its containers' requests (a limit stands for a missing
    request), cpu, memory and every extended resource (a name with a `/`)."""
    need: Counter[str] = Counter()
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in wanted.items():
            if name in ("cpu", "memory") or "/" in name:
                need[name] += parse_quantity(quantity)
    return dict(need)


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for toleration in tolerations or []:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key") or ""
        if operator == "Exists" and (not key or key == taint.get("key")):
            return True
        if (
            operator == "Equal"
            and key == taint.get("key")
            and (toleration.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def _node_term_matches(term: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    for expression in term.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        value = labels.get(key)
        if operator == "In" and value not in values:
            return False
        if operator == "NotIn" and value in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator in ("Gt", "Lt"):
            try:
                number, bound = int(value or ""), int(values[0])
            except (ValueError, IndexError):
                return False
            if (operator == "Gt" and not number > bound) or (
                operator == "Lt" and not number < bound
            ):
                return False
    for expression in term.get("matchFields") or []:
        name = node["metadata"]["name"]
        inside = name in (expression.get("values") or [])
        if (expression.get("operator") == "In") != inside:
            return False
    return True


def node_selected(pod: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    return not terms or any(_node_term_matches(term, node) for term in terms)


def unschedulable_message(reasons: dict[str, list[str]], total: int) -> str:
    """The real scheduler's FitError message: per node the reasons of the first filter
    that failed it (NodeResourcesFit names every insufficient resource), counted and
    sorted; then preemption's verdict (no victims where resources were short, not helpful
    where a taint, selector or cordon ruled the node out)."""
    counted: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    for node_reasons in reasons.values():
        counted.update(node_reasons)
        if all(r.startswith("Insufficient ") for r in node_reasons):
            preemption["No preemption victims found for incoming pod"] += 1
        else:
            preemption["Preemption is not helpful for scheduling"] += 1
    listed = ", ".join(sorted(f"{n} {r}" for r, n in counted.items()))
    victims = ", ".join(sorted(f"{n} {r}" for r, n in preemption.items()))
    return (
        f"0/{total} nodes are available: {listed}. preemption: 0/{total} nodes are available: "
        f"{victims}."
    )


# --- pod failure policy ------------------------------------------------------------------


def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first rule of the Job's podFailurePolicy that the failed
    pod matches, None if none does."""
    rules = ((job["spec"].get("podFailurePolicy") or {}).get("rules")) or []
    where = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    for index, rule in enumerate(rules):
        action = rule.get("action")
        exit_codes = rule.get("onExitCodes")
        if exit_codes:
            values = set(exit_codes.get("values") or [])
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if exit_codes.get("containerName") not in (None, status.get("name")):
                    continue
                terminated = (status.get("state") or {}).get("terminated")
                if not terminated or terminated.get("exitCode", 0) == 0:
                    continue
                code = terminated["exitCode"]
                if (code in values) == (exit_codes.get("operator") == "In"):
                    return action, (
                        f"Container {status['name']} for pod {where} failed with exit code "
                        f"{code} matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            found = condition(pod, pattern.get("type", ""))
            if found is not None and found.get("status") == pattern.get("status", "True"):
                return action, (
                    f"Pod {where} has condition {pattern['type']} matching {action} rule at "
                    f"index {index}"
                )
    return None


# --- the controller thread ---------------------------------------------------------------


class Controller:
    """The job controller, scheduler, garbage collector, TTL controller and kubelet, in
    one thread (module docstring). `errors`: what went wrong in it (a test's teardown
    reports them)."""

    def __init__(self, store: Store, *, cluster_id: str, runtime: ContainerRuntime | None = None):
        if runtime is None:
            from apps.providers.backends.local import container_runtime

            runtime = container_runtime("podman")
        self.store = store
        self.kubelet = Kubelet(store, runtime, cluster_id=cluster_id, errors=self._error)
        self.errors: list[str] = []
        # Pods the job controller deleted itself (suspension, a finished Job): not failures.
        self.expected_deletions: set[str] = set()
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kube-controller", daemon=True)

    def start(self) -> None:
        self.kubelet.remove_stale()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.store.changed.set()
        self._thread.join(timeout=30)
        self.kubelet.shutdown()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self._tick_lock:
            yield

    def reset(self) -> None:
        """Forget every pod (call it paused, after the store's reset)."""
        self.expected_deletions.clear()
        self.kubelet.reset()
        self.errors.clear()

    def _error(self, what: str) -> None:
        log.exception("kube emulator: %s", what)
        self.errors.append(what)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.store.changed.wait(TICK_S)
            self.store.changed.clear()
            if self._stop.is_set():
                break
            with self._tick_lock:
                try:
                    self.tick()
                except Exception as exc:  # one bad tick must not end the cluster
                    self._error(f"tick: {exc!r}")

    def tick(self) -> None:
        with self.store.lock:
            self.sync_jobs()
            self.schedule()
            self.collect_garbage()
            self.kubelet.sync()

    # -- job controller --

    def sync_jobs(self) -> None:
        store = self.store
        jobs = {job["metadata"]["uid"]: job for job in store.items("jobs")}
        pods_of: dict[str, list[Obj]] = {}
        for pod in store.items("pods"):
            owner = controller_uid(pod)
            job = jobs.get(owner or "")
            if job is None or deleting(job):
                # An orphan's or a deleted Job's pod: nothing counts it any more.
                if JOB_TRACKING_FINALIZER in _finalizers(pod) and (
                    terminal(pod) or (deleting(pod) and not pod["spec"].get("nodeName"))
                ):
                    store.put("pods", _without_finalizer(pod, JOB_TRACKING_FINALIZER))
                continue
            pods_of.setdefault(job["metadata"]["uid"], []).append(pod)
        for uid, job in jobs.items():
            if not deleting(job):
                self._sync_job(copy.deepcopy(job), pods_of.get(uid, []))

    def _sync_job(self, job: Obj, pods: list[Obj]) -> None:
        store = self.store
        spec, status = job["spec"], job.setdefault("status", {})
        finished = condition_true(job, "Complete") or condition_true(job, "Failed")
        has_policy = bool(spec.get("podFailurePolicy"))
        failure: tuple[str, str] | None = None
        if (target := condition(job, "FailureTarget")) is not None:
            failure = (target.get("reason", ""), target.get("message", ""))
        for pod in pods:
            if JOB_TRACKING_FINALIZER not in _finalizers(pod):
                continue
            uid = pod["metadata"]["uid"]
            phase = (pod.get("status") or {}).get("phase")
            failed = phase == "Failed" or (
                not has_policy and deleting(pod) and phase != "Succeeded"
            )
            if phase != "Succeeded" and not failed:
                continue  # still running: counted when it ends
            if uid in self.expected_deletions or finished:
                pass
            elif phase == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
            else:
                matched = match_pod_failure_policy(job, pod)
                if matched and matched[0] == "FailJob" and failure is None:
                    failure = ("PodFailurePolicy", matched[1])
                if not matched or matched[0] in ("Count", "FailJob", "FailIndex"):
                    status["failed"] = status.get("failed", 0) + 1
            self.expected_deletions.discard(uid)
            store.put("pods", _without_finalizer(pod, JOB_TRACKING_FINALIZER))
        live = self._live_pods(job, pods)
        active = [p for p in live if not deleting(p)]
        terminating = [p for p in live if deleting(p)]
        if not finished:
            if failure is None and status.get("failed", 0) > spec.get("backoffLimit", 6):
                failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            deadline = spec.get("activeDeadlineSeconds")
            if (
                failure is None
                and deadline is not None
                and status.get("startTime")
                and not spec.get("suspend")
                and (now() - parse_timestamp(status["startTime"])).total_seconds() >= deadline
            ):
                failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
            if failure is not None:
                if condition(job, "FailureTarget") is None:
                    set_condition(job, "FailureTarget", "True", *failure, probe=True)
                self._delete_pods(job, active)
                if not terminating and not active:
                    set_condition(job, "Failed", "True", *failure, probe=True)
                    store.record_event(
                        job, failure[0], failure[1], type_="Warning", component="job-controller"
                    )
            elif status.get("succeeded", 0) >= spec.get("completions", 1):
                set_condition(job, "Complete", "True", probe=True)
                status["completionTime"] = timestamp()
                store.record_event(job, "Completed", "Job completed", component="job-controller")
            elif spec.get("suspend"):
                self._delete_pods(job, active)
                if not condition_true(job, "Suspended"):
                    set_condition(
                        job, "Suspended", "True", "JobSuspended", "Job suspended", probe=True
                    )
                    store.record_event(
                        job, "Suspended", "Job suspended", component="job-controller"
                    )
                status.pop("startTime", None)
            else:
                if condition_true(job, "Suspended"):
                    set_condition(
                        job, "Suspended", "False", "JobResumed", "Job resumed", probe=True
                    )
                    store.record_event(job, "Resumed", "Job resumed", component="job-controller")
                status.setdefault("startTime", timestamp())
                replace_now = spec.get("podReplacementPolicy") != "Failed" or not terminating
                if not active and replace_now:
                    active = [self._create_pod(job)]
        elif condition_true(job, "Failed"):
            self._delete_pods(job, active)
        live = self._live_pods(job, live + active)
        active = [p for p in live if not deleting(p)]
        if active:
            status["active"] = len(active)
        else:
            status.pop("active", None)
        status["ready"] = len([p for p in active if condition_true(p, "Ready")])
        status["terminating"] = len(live) - len(active)
        status["uncountedTerminatedPods"] = {}
        if (ttl := spec.get("ttlSecondsAfterFinished")) is not None and (
            condition_true(job, "Complete") or condition_true(job, "Failed")
        ):
            ended = condition(job, "Complete") or condition(job, "Failed") or {}
            since = parse_timestamp(ended.get("lastTransitionTime") or timestamp())
            if (now() - since).total_seconds() >= ttl:
                stored = store.put("jobs", job)
                if stored is not None:
                    store.delete_object("jobs", stored, propagation="Foreground")
                return
        store.put("jobs", job)

    def _live_pods(self, job: Obj, pods: list[Obj]) -> list[Obj]:
        """The stored versions of `pods` that are still there and not finished."""
        namespace = job["metadata"]["namespace"]
        found = [self.store.lookup("pods", namespace, p["metadata"]["name"]) for p in pods]
        return [
            p
            for p in found
            if p is not None
            and p["metadata"]["uid"] in {q["metadata"]["uid"] for q in pods}
            and not terminal(p)
        ]

    def _delete_pods(self, job: Obj, pods: list[Obj]) -> None:
        for pod in pods:
            if deleting(pod):
                continue
            self.expected_deletions.add(pod["metadata"]["uid"])
            self.store.delete_object("pods", pod)
            self.store.record_event(
                job,
                "SuccessfulDelete",
                f"Deleted pod: {pod['metadata']['name']}",
                component="job-controller",
            )

    def _create_pod(self, job: Obj) -> Obj:
        meta = job["metadata"]
        template = copy.deepcopy(job["spec"]["template"])
        pod_meta = template.get("metadata") or {}
        uid = meta["uid"]
        labels = {
            **(pod_meta.get("labels") or {}),
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": uid,
            "job-name": meta["name"],
        }
        base = f"{meta['name']}-"[:58]
        while True:
            name = f"{base}{random_suffix()}"
            if self.store.lookup("pods", meta["namespace"], name) is None:
                break
        spec = template.get("spec") or {}
        default_pod_spec(spec)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key for t in tolerations):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )
        for container in spec.get("containers") or []:
            resources = container.setdefault("resources", {})
            if resources.get("limits"):
                requests = resources.setdefault("requests", {})
                for resource_name, quantity in resources["limits"].items():
                    requests.setdefault(resource_name, quantity)
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                **{k: v for k, v in pod_meta.items() if k in ("annotations",)},
                "name": name,
                "generateName": base,
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "creationTimestamp": timestamp(),
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [JOB_TRACKING_FINALIZER],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": _qos_class(spec)},
        }
        self.store.put("pods", pod)
        self.store.record_event(
            job, "SuccessfulCreate", f"Created pod: {name}", component="job-controller"
        )
        return pod

    # -- scheduler --

    def schedule(self) -> None:
        store = self.store
        nodes = sorted(store.nodes.values(), key=lambda n: n["metadata"]["name"])
        used: dict[str, Counter[str]] = {n["metadata"]["name"]: Counter() for n in nodes}
        pending = []
        for pod in store.items("pods"):
            node_name = pod["spec"].get("nodeName")
            if node_name and not terminal(pod):
                used.setdefault(node_name, Counter()).update(pod_requests(pod))
            elif not node_name and not terminal(pod) and not deleting(pod):
                pending.append(pod)
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        for pod in pending:
            if pod["spec"].get("schedulingGates"):
                self._unscheduled(
                    pod,
                    "SchedulingGated",
                    "Scheduling is blocked due to non-empty scheduling gates",
                    event=False,
                )
                continue
            need = pod_requests(pod)
            reasons: dict[str, list[str]] = {}
            chosen = None
            for node in nodes:
                node_reasons = self._filter(pod, node, need, used[node["metadata"]["name"]])
                if node_reasons:
                    reasons[node["metadata"]["name"]] = node_reasons
                elif chosen is None:
                    chosen = node
            if chosen is None:
                message = (
                    unschedulable_message(reasons, len(nodes))
                    if nodes
                    else "no nodes available to schedule pods"
                )
                self._unscheduled(pod, "Unschedulable", message)
                continue
            node_name = chosen["metadata"]["name"]
            used[node_name].update(need)
            bound = copy.deepcopy(pod)
            bound["spec"]["nodeName"] = node_name
            set_condition(bound, "PodScheduled", "True", probe=True)
            stored = store.put("pods", bound)
            store.record_event(
                stored or bound,
                "Scheduled",
                f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                f"to {node_name}",
                component="default-scheduler",
            )

    @staticmethod
    def _filter(pod: Obj, node: Obj, need: dict[str, Decimal], used: Counter[str]) -> list[str]:
        """Why the pod does not fit the node: the reasons of the first filter that fails,
        in the real scheduler's order; [] when it fits."""
        if node["spec"].get("unschedulable"):
            return ["node(s) were unschedulable"]
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
                pod["spec"].get("tolerations") or [], taint
            ):
                return [
                    f"node(s) had untolerated taint {{{taint.get('key')}: "
                    f"{taint.get('value', '')}}}"
                ]
        if not node_selected(pod, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        allocatable = node["status"].get("allocatable") or {}
        short = []
        for name, amount in sorted(need.items()):
            if amount <= 0:
                continue
            free = parse_quantity(allocatable.get(name, "0")) - used.get(name, Decimal(0))
            if amount > free:
                short.append(f"Insufficient {name}")
        return short

    def _unscheduled(self, pod: Obj, reason: str, message: str, *, event: bool = True) -> None:
        current = condition(pod, "PodScheduled")
        if current and current.get("reason") == reason and current.get("message") == message:
            return
        updated = copy.deepcopy(pod)
        set_condition(updated, "PodScheduled", "False", reason, message, probe=True)
        stored = self.store.put("pods", updated)
        if event:
            self.store.record_event(
                stored or updated,
                "FailedScheduling",
                message,
                type_="Warning",
                component="default-scheduler",
            )

    # -- garbage collector --

    def collect_garbage(self) -> None:
        """Dependents of owners that are gone (or going, in the foreground) deleted; a
        Foreground owner without dependents let go; an unscheduled pod being deleted
        marked Failed, as the pod garbage collector does."""
        store = self.store
        for pod in list(store.items("pods")):
            if deleting(pod) and not pod["spec"].get("nodeName") and not terminal(pod):
                failed = copy.deepcopy(pod)
                failed["status"]["phase"] = "Failed"
                store.put("pods", failed)
        for resource in list(store.objects):
            for obj in list(store.items(resource)):
                uids = owner_uids(obj)
                if not uids:
                    continue
                owners = [store.object_of_uid(uid) for uid in uids]
                live = [owner for owner in owners if owner is not None]
                if not live:
                    if not deleting(obj):
                        store.delete_object(resource, obj)
                    continue
                if not deleting(obj) and any(
                    deleting(o) and FOREGROUND_FINALIZER in _finalizers(o) for _, o in live
                ):
                    store.delete_object(resource, obj)
        for resource in list(store.objects):
            for obj in list(store.items(resource)):
                if (
                    deleting(obj)
                    and FOREGROUND_FINALIZER in _finalizers(obj)
                    and not store.by_owner(obj["metadata"]["uid"])
                ):
                    store.put(resource, _without_finalizer(obj, FOREGROUND_FINALIZER))


def _qos_class(spec: Obj) -> str:
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("limits") or r.get("requests") for r in resources):
        return "BestEffort"
    guaranteed = all(
        all(
            r.get("limits", {}).get(k)
            and r.get("limits", {}).get(k) == r.get("requests", {}).get(k)
            for k in ("cpu", "memory")
        )
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"


# --- the kubelet -------------------------------------------------------------------------


@dataclass
class PodRecord:
    """What the kubelet knows of one pod it runs (or tries to)."""

    uid: str
    namespace: str
    name: str
    container: str  # podman's name for it
    host_dir: Path
    busy: bool = False  # a worker thread is on it
    state: str = "new"  # new, waiting, running, exited
    next_try: float = 0.0
    pull_failures: int = 0
    waiting_reason: str = ""
    backoff_at: float = 0.0  # when ErrImagePull turns ImagePullBackOff
    stop_requested: bool = False
    stopped_by_us: bool = False
    memory_limited: bool = False
    image_id: str = ""
    container_id: str = ""
    started_at: str = ""
    final_deleted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Kubelet:
    """Runs the bound pods as podman containers (module docstring). Called by the
    controller's tick with the store's lock held (`sync`); podman is driven from worker
    threads that take the lock only to write a pod's status."""

    def __init__(
        self,
        store: Store,
        runtime: ContainerRuntime,
        *,
        cluster_id: str,
        errors: Callable[[str], None],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.cluster_id = cluster_id
        self.records: dict[str, PodRecord] = {}
        self.root = Path(tempfile.mkdtemp(prefix=f"kube-emulator-{cluster_id}-"))
        self._error = errors
        self._binary = shutil.which(runtime.binary) or runtime.binary
        store.log_reader = self.read_log

    # -- podman --

    def _podman(self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None):
        return subprocess.run(
            [self._binary, *self.runtime.global_args, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env if env is not None else _cli_env(),
            stdin=subprocess.DEVNULL,
        )

    def _our_containers(self, label: str) -> list[str]:
        listed = self._podman("ps", "--all", "--quiet", "--filter", f"label={label}")
        return listed.stdout.split()

    def _remove_containers(self, ids: list[str]) -> None:
        if ids:
            self._podman("rm", "--force", "--time", "0", *ids, timeout=120)

    def remove_stale(self) -> None:
        """Containers an earlier test process of this host left (it was killed before its
        teardown): removed when that process is gone."""
        listed = self._podman(
            "ps",
            "--all",
            "--filter",
            f"label={LABEL}",
            "--format",
            f'{{{{.ID}}}}\t{{{{index .Labels "{PID_LABEL}"}}}}',
        )
        stale = []
        for line in listed.stdout.splitlines():
            container, _, pid = line.partition("\t")
            if pid.strip().isdigit() and not Path(f"/proc/{pid.strip()}").exists():
                stale.append(container)
        self._remove_containers(stale)

    def reset(self) -> None:
        with self.store.lock:
            self.records.clear()
        self._remove_containers(self._our_containers(f"{LABEL}={self.cluster_id}"))
        for child in self.root.iterdir():
            shutil.rmtree(child, ignore_errors=True)

    def shutdown(self) -> None:
        self.reset()
        shutil.rmtree(self.root, ignore_errors=True)

    def kill(self, pod: Obj) -> None:
        """SIGKILL the pod's container (the `kill_container` hook)."""
        with self.store.lock:
            record = self.records.get(pod["metadata"]["uid"])
            if record is None or record.state != "running":
                raise LookupError(f"pod {pod['metadata']['name']} has no running container")
            record.extra["killed"] = True
        self._podman("kill", "--signal", "KILL", record.container)

    # -- the sync loop (store lock held) --

    def _spawn(self, record: PodRecord, target: Callable[..., None], *args: Any) -> None:
        record.busy = True

        def work() -> None:
            try:
                target(record, *args)
            except Exception as exc:
                self._error(f"kubelet {target.__name__} {record.name}: {exc!r}")
            finally:
                with self.store.lock:
                    record.busy = False
                    self.store.changed.set()

        threading.Thread(target=work, name=f"kubelet-{record.name}", daemon=True).start()

    def sync(self) -> None:
        store = self.store
        every = {pod["metadata"]["uid"]: pod for pod in store.items("pods")}
        for uid, record in list(self.records.items()):
            if uid not in every and not record.busy:
                del self.records[uid]
                self._spawn(record, self._clean_up)
        for uid, pod in every.items():
            if not pod["spec"].get("nodeName"):
                continue
            record = self.records.get(uid)
            if record is None:
                if terminal(pod):
                    continue
                if deleting(pod):
                    self._finish_unstarted(pod)
                    continue
                meta = pod["metadata"]
                record = PodRecord(
                    uid=uid,
                    namespace=meta["namespace"],
                    name=meta["name"],
                    container=f"k8s-{meta['namespace']}-{meta['name']}",
                    host_dir=self.root / f"{meta['namespace']}_{meta['name']}_{uid[:8]}",
                )
                self.records[uid] = record
                self._mark_pending(pod)
            if record.busy:
                continue
            if deleting(pod):
                if record.state == "running" and not record.stop_requested:
                    record.stop_requested = True
                    grace = int(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                    store.record_event(
                        pod, "Killing", f"Stopping container {pod['spec']['containers'][0]['name']}"
                    )
                    self._spawn(record, self._stop_container, grace)
                elif record.state in ("new", "waiting"):
                    self._finish_unstarted(pod)
                    record.state = "exited"
                elif record.state == "exited" and not record.final_deleted:
                    record.final_deleted = True
                    store.delete_object("pods", pod, grace=0)
                continue
            if (
                record.state == "waiting"
                and record.waiting_reason == "ErrImagePull"
                and time.monotonic() >= record.backoff_at
            ):
                self._show_pull_backoff(record, pod)
            if record.state in ("new", "waiting") and time.monotonic() >= record.next_try:
                self._spawn(record, self._start, copy.deepcopy(pod))

    def _mark_pending(self, pod: Obj) -> None:
        updated = copy.deepcopy(pod)
        status = updated["status"]
        status.setdefault("startTime", timestamp())
        status["hostIP"] = "127.0.0.1"
        status["hostIPs"] = [{"ip": "127.0.0.1"}]
        set_condition(updated, "PodReadyToStartContainers", "False", probe=True)
        set_condition(updated, "Initialized", "True", probe=True)
        self._not_ready(updated, "ContainersNotReady")
        container = updated["spec"]["containers"][0]
        status["containerStatuses"] = [
            self._container_status(container, None, {"waiting": {"reason": "ContainerCreating"}})
        ]
        self.store.put("pods", updated)

    def _not_ready(self, pod: Obj, reason: str) -> None:
        names = ",".join(c["name"] for c in pod["spec"]["containers"][:1])
        message = (
            f"containers with unready status: [{names}]" if reason == "ContainersNotReady" else ""
        )
        set_condition(pod, "Ready", "False", reason, message, probe=True)
        set_condition(pod, "ContainersReady", "False", reason, message, probe=True)

    def _container_status(
        self, container: Obj, record: PodRecord | None, state: Obj, *, ready: bool = False
    ) -> Obj:
        status = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": record.image_id if record else "",
            "ready": ready,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
            "lastState": {},
        }
        if record and record.container_id:
            status["containerID"] = f"podman://{record.container_id}"
        return status

    def _finish_unstarted(self, pod: Obj) -> None:
        """A pod deleted before its container ran: Failed, then gone (when no finalizer
        holds it)."""
        updated = copy.deepcopy(pod)
        if not terminal(updated):
            updated["status"]["phase"] = "Failed"
            self._not_ready(updated, "PodFailed")
        stored = self.store.put("pods", updated)
        if stored is not None:
            self.store.delete_object("pods", stored, grace=0)

    def _show_pull_backoff(self, record: PodRecord, pod: Obj) -> None:
        image = pod["spec"]["containers"][0].get("image", "")
        detail = record.extra.get("pull_error", "")
        record.waiting_reason = "ImagePullBackOff"
        self._set_waiting(
            record, "ImagePullBackOff", f'Back-off pulling image "{image}": ErrImagePull: {detail}'
        )
        self.store.record_event(pod, "BackOff", f'Back-off pulling image "{image}"', type_="Normal")
        self.store.record_event(pod, "Failed", "Error: ImagePullBackOff", type_="Warning")

    # -- writing a pod's status from a worker --

    def _update(self, record: PodRecord, change: Callable[[Obj], None]) -> Obj | None:
        """Apply `change` to a copy of the record's pod and store it (store lock taken);
        None when the pod or the record is gone (a reset, a force delete)."""
        with self.store.lock:
            if self.records.get(record.uid) is not record:
                return None
            pod = self.store.lookup("pods", record.namespace, record.name)
            if pod is None or pod["metadata"]["uid"] != record.uid:
                return None
            updated = copy.deepcopy(pod)
            change(updated)
            return self.store.put("pods", updated) or updated

    def _set_waiting(self, record: PodRecord, reason: str, message: str) -> None:
        record.state = "waiting"
        record.waiting_reason = reason

        def change(pod: Obj) -> None:
            container = pod["spec"]["containers"][0]
            state = {"waiting": {"reason": reason, "message": message}}
            pod["status"]["containerStatuses"] = [self._container_status(container, record, state)]
            self._not_ready(pod, "ContainersNotReady")

        self._update(record, change)

    # -- workers --

    def _start(self, record: PodRecord, pod: Obj) -> None:
        if not record.extra.get("initialized") and not self._run_init_containers(record, pod):
            return
        container = pod["spec"]["containers"][0]
        image = container.get("image", "")
        policy = container.get("imagePullPolicy", "IfNotPresent")
        if not self._image_ready(record, pod, image, policy):
            return
        with self.store.lock:
            problem, env = resolve_env(self.store, pod, container)
            volumes, mount_problem = self._collect_volumes(pod)
        if problem:
            record.next_try = time.monotonic() + CONFIG_RETRY_S
            self._set_waiting(record, "CreateContainerConfigError", problem)
            self._event(record, "Failed", f"Error: {problem}", warning=True)
            return
        if mount_problem:
            record.next_try = time.monotonic() + CONFIG_RETRY_S
            self._set_waiting(record, "ContainerCreating", "")
            self._event(record, "FailedMount", mount_problem, warning=True)
            return
        argv, cli_env = self._run_argv(record, pod, container, env, volumes)
        with self.store.lock:
            if self.records.get(record.uid) is not record or record.stop_requested:
                return  # deleted (or reset) while we prepared: never start it
        self._event(record, "Pulled", f'Container image "{image}" already present on machine')
        result = subprocess.run(
            argv, capture_output=True, text=True, env=cli_env, timeout=120, stdin=subprocess.DEVNULL
        )
        if result.returncode != 0:
            self._podman("rm", "--force", "--time", "0", record.container)
            message = _last_line(result.stderr) or f"podman run exited {result.returncode}"
            if (
                result.returncode in (126, 127)
                or "executable file" in message
                or "no such file" in message.lower()
            ):
                self._terminated(record, pod, 128, "StartError", message, "", "")
                self._event(record, "Failed", f"Error: {message}", warning=True)
                return
            record.next_try = time.monotonic() + 2 * CONFIG_RETRY_S
            self._set_waiting(record, "CreateContainerError", message)
            self._event(record, "Failed", f"Error: {message}", warning=True)
            return
        record.container_id = (
            result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        )
        state = self._inspect(record.container)
        record.started_at = _k8s_time(state.get("StartedAt")) or timestamp()
        with self.store.lock:
            current = self.records.get(record.uid) is record
            stop = record.stop_requested
            record.state = "running"
        if not current:
            self._podman("rm", "--force", "--time", "0", record.container)
            return
        name = container["name"]

        def running(pod_now: Obj) -> None:
            state = {"running": {"startedAt": record.started_at}}
            pod_now["status"]["phase"] = "Running"
            pod_now["status"]["podIP"] = POD_IP
            pod_now["status"]["podIPs"] = [{"ip": POD_IP}]
            pod_now["status"]["containerStatuses"] = [
                self._container_status(container, record, state, ready=True)
            ]
            set_condition(pod_now, "PodReadyToStartContainers", "True", probe=True)
            set_condition(pod_now, "Ready", "True", probe=True)
            set_condition(pod_now, "ContainersReady", "True", probe=True)

        self._update(record, running)
        self._event(record, "Created", f"Created container {name}")
        self._event(record, "Started", f"Started container {name}")
        threading.Thread(
            target=self._wait, args=(record, pod), name=f"kubelet-wait-{record.name}", daemon=True
        ).start()
        if stop:
            self._stop_container(
                record, int(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            )

    def _run_init_containers(self, record: PodRecord, pod: Obj) -> bool:
        """Run the pod's init containers in order, each to its end, with the pod's volumes
        (as the real kubelet does before the first container starts). True when all exited
        0; else the pod is Failed (its `initContainerStatuses` say how) or waits (an image or
        a config problem, tried again), and False."""
        for index, init in enumerate(pod["spec"].get("initContainers") or []):
            image = init.get("image", "")
            if not self._image_ready(
                record, pod, image, init.get("imagePullPolicy", "IfNotPresent")
            ):
                return False
            with self.store.lock:
                problem, env = resolve_env(self.store, pod, init)
                volumes, mount_problem = self._collect_volumes(pod)
            if problem or mount_problem:
                record.next_try = time.monotonic() + CONFIG_RETRY_S
                self._set_waiting(record, "CreateContainerConfigError", problem or mount_problem)
                return False
            argv, cli_env = self._run_argv(record, pod, init, env, volumes)
            name = f"{record.container}-init-{index}"
            argv[argv.index("--name") + 1] = name
            argv.remove("--detach")
            with self.store.lock:
                if self.records.get(record.uid) is not record or record.stop_requested:
                    return False
            started = timestamp()
            result = subprocess.run(
                argv, capture_output=True, text=True, env=cli_env, timeout=300,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            self._podman("rm", "--force", "--time", "0", name)
            terminated: Obj = {
                "exitCode": result.returncode,
                "reason": "Completed" if result.returncode == 0 else "Error",
                "startedAt": started,
                "finishedAt": timestamp(),
            }
            if result.returncode != 0 and result.stderr.strip():
                terminated["message"] = result.stderr.strip()[-1024:]

            def initialized(pod_now: Obj, init=init, terminated=terminated) -> None:
                statuses = [
                    s for s in pod_now["status"].get("initContainerStatuses") or []
                    if s["name"] != init["name"]
                ]  # fmt: skip
                statuses.append(self._container_status(init, record, {"terminated": terminated}))
                pod_now["status"]["initContainerStatuses"] = statuses
                if terminated["exitCode"] != 0:
                    pod_now["status"]["phase"] = "Failed"
                    main = pod_now["spec"]["containers"][0]
                    waiting = {"waiting": {"reason": "PodInitializing"}}
                    pod_now["status"]["containerStatuses"] = [
                        self._container_status(main, record, waiting)
                    ]
                    self._not_ready(pod_now, "PodFailed")

            self._update(record, initialized)
            if result.returncode != 0:
                with self.store.lock:
                    record.state = "exited"
                    self.store.changed.set()
                return False
        record.extra["initialized"] = True
        return True

    def _image_ready(self, record: PodRecord, pod: Obj, image: str, policy: str) -> bool:
        try:
            if policy == "Never":
                if self._podman("image", "exists", image).returncode != 0:
                    message = f'Container image "{image}" is not present with pull policy of Never'
                    record.next_try = time.monotonic() + CONFIG_RETRY_S
                    self._set_waiting(record, "ErrImageNeverPull", message)
                    self._event(record, "ErrImageNeverPull", message, warning=True)
                    return False
            else:
                self.runtime.ensure_image(image, pull_timeout_s=PULL_TIMEOUT_S)
        except ImageRefused:
            message = (
                f'Failed to apply default image tag "{image}": couldn\'t parse image name '
                f'"{image}": invalid reference format'
            )
            record.next_try = math.inf
            self._set_waiting(record, "InvalidImageName", message)
            self._event(record, "InspectFailed", message, warning=True)
            return False
        except (ImageUnavailable, ContainerError) as exc:
            detail = str(exc).split(": ", 1)[-1] if isinstance(exc, ImageUnavailable) else str(exc)
            record.pull_failures += 1
            record.extra["pull_error"] = detail
            first, cap = PULL_BACKOFF_S
            record.next_try = time.monotonic() + min(cap, first * 2 ** (record.pull_failures - 1))
            record.backoff_at = time.monotonic() + BACKOFF_SHOWN_AFTER_S
            message = f'Failed to pull image "{image}": {detail}'
            self._set_waiting(record, "ErrImagePull", message)
            self._event(record, "Failed", message, warning=True)
            self._event(record, "Failed", "Error: ErrImagePull", warning=True)
            return False
        if not record.image_id:
            found = self._podman("image", "inspect", "--format", "{{.Id}}", image)
            record.image_id = f"sha256:{found.stdout.strip()}" if found.returncode == 0 else ""
        return True

    def _collect_volumes(self, pod: Obj) -> tuple[dict[str, Obj], str]:
        """Each volume's kind and content (store lock held); a FailedMount message when a
        ConfigMap or Secret it needs is missing or its kind is not emulated."""
        namespace = pod["metadata"]["namespace"]
        volumes: dict[str, Obj] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume.get("name")
            if "emptyDir" in volume:
                volumes[name] = {"kind": "emptyDir", **(volume.get("emptyDir") or {})}
            elif "configMap" in volume or "secret" in volume:
                secret = "secret" in volume
                source = volume["secret" if secret else "configMap"] or {}
                source_name = source.get("secretName" if secret else "name")
                obj = self.store.lookup(
                    "secrets" if secret else "configmaps", namespace, source_name or ""
                )
                if obj is None:
                    if source.get("optional"):
                        volumes[name] = {"kind": "files", "files": {}}
                        continue
                    what = "secret" if secret else "configmap"
                    return volumes, (
                        f'MountVolume.SetUp failed for volume "{name}" : {what} "{source_name}" '
                        "not found"
                    )
                contents: dict[str, bytes] = {}
                for key, value in (obj.get("data") or {}).items():
                    contents[key] = base64.b64decode(value) if secret else str(value).encode()
                for key, value in (obj.get("binaryData") or {}).items():
                    contents[key] = base64.b64decode(value)
                mode = source.get("defaultMode", 0o644)
                files: dict[str, tuple[bytes, int]] = {}
                items = source.get("items")
                if items:
                    for item in items:
                        if item.get("key") not in contents:
                            if source.get("optional"):
                                continue
                            return volumes, (
                                f'MountVolume.SetUp failed for volume "{name}" : configmap '
                                f"references non-existent config key: {item.get('key')}"
                            )
                        files[item["path"]] = (contents[item["key"]], item.get("mode", mode))
                else:
                    files = {key: (value, mode) for key, value in contents.items()}
                volumes[name] = {"kind": "files", "files": files}
            else:
                kinds = sorted(k for k in volume if k != "name")
                return volumes, (
                    f'MountVolume.SetUp failed for volume "{name}" : the emulated kubelet has no '
                    f"{', '.join(kinds) or 'such'} volumes"
                )
        return volumes, ""

    def _run_argv(
        self,
        record: PodRecord,
        pod: Obj,
        container: Obj,
        env: dict[str, str],
        volumes: dict[str, Obj],
    ) -> tuple[list[str], dict[str, str]]:
        meta = pod["metadata"]
        spec = pod["spec"]
        record.host_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            self._binary,
            *self.runtime.global_args,
            "run",
            "--detach",
            "--pull=never",
            "--name",
            record.container,
            "--hostname",
            meta["name"][:63].rstrip("-."),
            NETWORK,
            "--label",
            f"{LABEL}={self.cluster_id}",
            "--label",
            f"{PID_LABEL}={os.getpid()}",
            "--label",
            f"io.kubernetes.pod.name={meta['name']}",
            "--label",
            f"io.kubernetes.pod.namespace={meta['namespace']}",
            "--label",
            f"io.kubernetes.pod.uid={meta['uid']}",
            "--stop-timeout",
            str(int(spec.get("terminationGracePeriodSeconds", 30))),
            *self.runtime.run_args,
        ]
        if container.get("workingDir"):
            argv += ["--workdir", container["workingDir"]]
        context = {
            **(spec.get("securityContext") or {}),
            **(container.get("securityContext") or {}),
        }
        if context.get("runAsUser") is not None:
            user = str(int(context["runAsUser"]))
            if context.get("runAsGroup") is not None:
                user += f":{int(context['runAsGroup'])}"
            argv += ["--user", user]
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        for group in [
            fs_group,
            *((spec.get("securityContext") or {}).get("supplementalGroups") or []),
        ]:
            if group is not None:
                argv += ["--group-add", str(int(group))]
        if context.get("readOnlyRootFilesystem"):
            argv.append("--read-only")
        capabilities = context.get("capabilities") or {}
        for capability in capabilities.get("drop") or []:
            argv += ["--cap-drop", str(capability).lower()]
        for capability in capabilities.get("add") or []:
            argv += ["--cap-add", str(capability).lower()]
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        if memory is not None:
            limit = int(parse_quantity(memory))
            argv += ["--memory", str(limit), "--memory-swap", str(limit)]
            record.memory_limited = True
        # The termination message: a host file the container may write.
        message_file = record.host_dir / "termination-log"
        message_file.touch()
        message_file.chmod(0o666)
        argv += [
            "--volume",
            f"{message_file}:{container.get('terminationMessagePath', '/dev/termination-log')}:rw",
        ]
        for mount in container.get("volumeMounts") or []:
            argv += self._mount(record, mount, volumes.get(mount.get("name"), {}), fs_group)
        cli_env = _cli_env()
        for name, value in env.items():
            if name in CLI_ENV_NAMES:
                argv += ["--env", f"{name}={value}"]
            else:
                argv += ["--env", name]
                cli_env[name] = value
        command = [expand(part, env) for part in container.get("command") or []]
        args = [expand(part, env) for part in container.get("args") or []]
        if command:
            argv += ["--entrypoint", json.dumps(command[:1])]
        argv += [container["image"], *command[1:], *args]
        record.extra["message_file"] = message_file
        record.extra["message_policy"] = container.get("terminationMessagePolicy", "File")
        return argv, cli_env

    def _mount(
        self, record: PodRecord, mount: Obj, volume: Obj, fs_group: int | None = None
    ) -> list[str]:
        """The `run` flags of one volumeMount, its host directory made on first use
        (files written with their modes; group-owned by the pod's fsGroup, as the real
        kubelet does)."""
        name, path = mount.get("name", ""), mount.get("mountPath", "")
        if volume.get("kind") == "emptyDir" and volume.get("medium") == "Memory":
            size = volume.get("sizeLimit")
            if path == "/dev/shm":
                return ["--shm-size", f"{int(parse_quantity(size))}" if size else DEFAULT_SHM]
            # Any other memory emptyDir is a host directory, as a disk one: an init
            # container and the pod's container share what it holds (a tmpfs would be each
            # container's own).
        host = record.host_dir / "volumes" / name
        if not host.exists():
            host.mkdir(parents=True, mode=0o777)
            host.chmod(0o777)
            for relative, (content, mode) in (volume.get("files") or {}).items():
                target = host / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                target.chmod(mode)
                if fs_group is not None:
                    os.chown(target, -1, int(fs_group))
            if fs_group is not None:
                os.chown(host, -1, int(fs_group))
        read_only = volume.get("kind") == "files" or mount.get("readOnly")
        if mount.get("subPath"):
            host = host / mount["subPath"]
            if volume.get("kind") == "emptyDir":
                host.mkdir(parents=True, exist_ok=True)
        return ["--volume", f"{host}:{path}:{'ro' if read_only else 'rw'}"]

    def _wait(self, record: PodRecord, pod: Obj) -> None:
        try:
            self._podman("wait", record.container, timeout=10 * 24 * 3600)
        except subprocess.TimeoutExpired:
            return
        state = self._inspect(record.container)
        with self.store.lock:
            if self.records.get(record.uid) is not record:
                return
        if not state:
            self._terminated(
                record,
                pod,
                137,
                "ContainerStatusUnknown",
                "The container could not be located when the pod was terminated",
                record.started_at,
                timestamp(),
            )
            return
        code = int(state.get("ExitCode", 0))
        killed_by_us = record.stopped_by_us or record.extra.get("killed")
        if state.get("OOMKilled") or (code == 137 and record.memory_limited and not killed_by_us):
            reason = "OOMKilled"
        else:
            reason = "Completed" if code == 0 else "Error"
        message = self._termination_message(record, code)
        self._terminated(
            record,
            pod,
            code,
            reason,
            message,
            _k8s_time(state.get("StartedAt")) or record.started_at,
            _k8s_time(state.get("FinishedAt")) or timestamp(),
        )

    def _termination_message(self, record: PodRecord, code: int) -> str:
        path: Path | None = record.extra.get("message_file")
        text = ""
        if path is not None:
            try:
                with open(path, "rb") as handle:
                    text = handle.read(TERMINATION_MESSAGE_MAX).decode("utf-8", "replace")
            except OSError:
                text = ""
        if not text and code != 0 and record.extra.get("message_policy") == "FallbackToLogsOnError":
            logs = self._podman("logs", "--tail", "80", record.container)
            text = (logs.stdout + logs.stderr)[-2048:]
        return text

    def _terminated(
        self,
        record: PodRecord,
        pod: Obj,
        code: int,
        reason: str,
        message: str,
        started: str,
        finished: str,
    ) -> None:
        container = pod["spec"]["containers"][0]
        terminated: Obj = {"exitCode": code, "reason": reason}
        if message:
            terminated["message"] = message
        if started:
            terminated["startedAt"] = started
        terminated["finishedAt"] = finished or timestamp()
        if record.container_id:
            terminated["containerID"] = f"podman://{record.container_id}"

        def change(pod_now: Obj) -> None:
            pod_now["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            pod_now["status"]["containerStatuses"] = [
                self._container_status(container, record, {"terminated": terminated})
            ]
            set_condition(pod_now, "PodReadyToStartContainers", "False", probe=True)
            self._not_ready(pod_now, "PodCompleted" if code == 0 else "PodFailed")

        self._update(record, change)
        with self.store.lock:
            record.state = "exited"  # after the status: the final delete must not come first
            self.store.changed.set()

    def _stop_container(self, record: PodRecord, grace: int) -> None:
        record.stopped_by_us = True
        self._podman("stop", "--time", str(max(0, grace)), record.container, timeout=grace + 120)

    def _clean_up(self, record: PodRecord) -> None:
        self._podman("rm", "--force", "--time", "0", record.container, timeout=120)
        shutil.rmtree(record.host_dir, ignore_errors=True)

    def _inspect(self, name: str) -> Obj:
        found = self._podman("container", "inspect", "--format", "{{json .State}}", name)
        if found.returncode != 0:
            return {}
        try:
            return json.loads(found.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}

    def _event(
        self, record: PodRecord, reason: str, message: str, *, warning: bool = False
    ) -> None:
        with self.store.lock:
            pod = self.store.lookup("pods", record.namespace, record.name)
            if pod is not None and pod["metadata"]["uid"] == record.uid:
                self.store.record_event(
                    pod,
                    reason,
                    message,
                    type_="Warning" if warning else "Normal",
                    host=pod["spec"].get("nodeName"),
                )

    # -- logs (the API server's pods/{name}/log) --

    def read_log(self, pod: Obj, container: str, query: dict[str, str]) -> str:
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        pod_name = pod["metadata"]["name"]
        if container not in names:
            raise ApiError(
                400, "BadRequest", f"container {container} is not valid for pod {pod_name}"
            )
        with self.store.lock:
            record = self.records.get(pod["metadata"]["uid"])
        if query.get("previous") in ("true", "1"):
            raise ApiError(
                400,
                "BadRequest",
                f'previous terminated container "{container}" in pod "{pod_name}" not found',
            )
        if record is None or record.state not in ("running", "exited") or container != names[0]:
            reason = (
                record.waiting_reason if record and record.waiting_reason else "ContainerCreating"
            )
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{pod_name}" is waiting to start: {reason}',
            )
        args = ["logs"]
        if query.get("tailLines"):
            args += ["--tail", str(int(query["tailLines"]))]
        if query.get("sinceSeconds"):
            args += ["--since", f"{int(query['sinceSeconds'])}s"]
        if query.get("timestamps") in ("true", "1"):
            args.append("--timestamps")
        found = self._podman(*args, record.container)
        text = found.stdout + found.stderr
        if query.get("limitBytes"):
            text = text.encode()[: int(query["limitBytes"])].decode("utf-8", "replace")
        return text


# --- env ---------------------------------------------------------------------------------

_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable's value, `$$` a literal `$`, an
    undefined reference left as it is."""

    def replace(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        name = found.group(1)
        return env.get(name, found.group(0))

    return _REFERENCE.sub(replace, text)


def _field_ref(pod: Obj, path: str) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.podIP": POD_IP,
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path] or "")
    found = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if found:
        return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
    return ""


def _resource_ref(container: Obj, ref: Obj) -> str:
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        value = "8" if name == "cpu" else str(32 * 2**30) if name == "memory" else "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(value) / divisor))


def resolve_env(store: Store, pod: Obj, container: Obj) -> tuple[str, dict[str, str]]:
    """The container's environment, and what is wrong with it ("" when nothing is), as
    the kubelet makes it (store lock held)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}

    def source(kind: str, name: str) -> Obj | None:
        return store.lookup("secrets" if kind == "Secret" else "configmaps", namespace, name)

    def decoded(kind: str, obj: Obj) -> dict[str, str]:
        values = {}
        for key, value in (obj.get("data") or {}).items():
            values[key] = (
                base64.b64decode(value).decode("utf-8", "replace") if kind == "Secret" else value
            )
        return values

    for env_from in container.get("envFrom") or []:
        for kind, field_name in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
            ref = env_from.get(field_name)
            if not ref:
                continue
            obj = source(kind, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                return f'{kind.lower()} "{ref.get("name")}" not found', env
            for key, value in decoded(kind, obj).items():
                env[f"{env_from.get('prefix', '')}{key}"] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var or var["valueFrom"] is None:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        value_from = var["valueFrom"]
        for kind, field_name in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            ref = value_from.get(field_name)
            if not ref:
                continue
            obj = source(kind, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    break
                return f'{kind.lower()} "{ref.get("name")}" not found', env
            values = decoded(kind, obj)
            if ref.get("key") not in values:
                if ref.get("optional"):
                    break
                return (
                    f"couldn't find key {ref.get('key')} in {kind} {namespace}/{ref.get('name')}",
                    env,
                )
            env[name] = values[ref["key"]]
            break
        else:
            if value_from.get("fieldRef"):
                env[name] = _field_ref(pod, value_from["fieldRef"].get("fieldPath", ""))
            elif value_from.get("resourceFieldRef"):
                env[name] = _resource_ref(container, value_from["resourceFieldRef"])
    return "", env


def _cli_env() -> dict[str, str]:
    return {name: os.environ[name] for name in CLI_ENV_NAMES if name in os.environ}


def _k8s_time(value: Any) -> str:
    """podman's time (RFC 3339 with nanoseconds) as Kubernetes' (seconds, Z)."""
    if not value or str(value).startswith("0001-"):
        return ""
    return str(value)[:19] + "Z"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
