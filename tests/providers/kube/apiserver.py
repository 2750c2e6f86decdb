"""The emulated cluster's API server: an in-memory store of objects behind a small HTTP
server that speaks enough of the Kubernetes REST API for the official client.

Every object has the metadata Kubernetes gives it (uid, an increasing resourceVersion,
creationTimestamp, namespace, generation for Jobs) and Jobs, Secrets and ConfigMaps are
defaulted and validated as the real API server does for the fields a backend uses; errors
are `Status` objects with the real reasons, codes and (mostly) words. Every request needs
`Authorization: Bearer <token>`; a request whose (verb, group, resource) is in the deny set
is Forbidden, and a SelfSubjectAccessReview for it answers `allowed: false`.

Deletion follows the real rules: a pod that runs on a node is deleted gracefully (its
deletionTimestamp set, the kubelet stops its container, then deletes it for good); an
object with finalizers stays, marked, until they are removed; `Foreground` adds the
`foregroundDeletion` finalizer, which the garbage collector (`kubelet.Controller`) removes
once the object's dependents are gone; `Orphan` strips the dependents' owner references;
`Background` removes the object at once and leaves its dependents to the collector. A Job
deleted without a propagationPolicy orphans its pods, as batch/v1 does.

Not emulated: watches (a `watch=true` request is refused), server-side apply, pagination
(`limit` is ignored), strategic merge patch's list merging and `$` directives (it is applied
as a JSON merge patch), managedFields, admission and every kind not in RESOURCES.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

Obj = dict[str, Any]

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-emulated",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# Pods made by the job controller carry it until the controller has counted them.
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
FOREGROUND_FINALIZER = "foregroundDeletion"
DEFAULT_GRACE_S = 30
MAX_CONFIG_BYTES = 1024 * 1024  # a ConfigMap's or Secret's data, at most
GENERATE_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' utilrand alphabet


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    creatable: bool = True  # pods: only the job controller makes them

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How messages name the resource: `jobs.batch`, `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """How Invalid messages name the kind: `Job.batch`, `Secret`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


RESOURCES = {
    "configmaps": Resource("configmaps", "ConfigMap"),
    "secrets": Resource("secrets", "Secret"),
    "events": Resource("events", "Event"),
    "pods": Resource("pods", "Pod", creatable=False),
    "jobs": Resource("jobs", "Job", group="batch"),
    # Stored, never enforced (the emulated pods' networks are their own anyway).
    "networkpolicies": Resource("networkpolicies", "NetworkPolicy", group="networking.k8s.io"),
}
GROUP_RESOURCES = {(r.group, r.plural): r for r in RESOURCES.values()}
SUBRESOURCES = {("jobs", "status"), ("pods", "status"), ("pods", "log")}


class Request(NamedTuple):
    """One request the server answered: `query` holds the last value of each parameter."""

    method: str
    path: str
    query: dict[str, str]


class ApiError(Exception):
    """An error answered as a Kubernetes `Status`."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def _details(res: Resource, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": res.plural}
    if res.group:
        details["group"] = res.group
    return details


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


class Cause(NamedTuple):
    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, ...
    message: str  # the whole cause: `metadata.name: Invalid value: "x": ...`


def invalid(res: Resource, name: str, causes: list[Cause]) -> ApiError:
    listed = causes[0].message if len(causes) == 1 else f"[{', '.join(c.message for c in causes)}]"
    details = {
        "name": name,
        "kind": res.kind,
        "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
    }
    if res.group:
        details["group"] = res.group
    return ApiError(422, "Invalid", f'{res.qualified_kind} "{name}" is invalid: {listed}', details)


def now() -> datetime:
    return datetime.now(UTC)


def timestamp(when: datetime | None = None) -> str:
    """RFC 3339 at seconds, as Kubernetes' metav1.Time."""
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(GENERATE_SUFFIX_ALPHABET) for _ in range(length))


# --- validation -------------------------------------------------------------------------

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
CONFIG_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)
ENV_NAME_MESSAGE = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  "
    "or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)


def _quote(value: Any) -> str:
    return json.dumps(value)


def _invalid_value(field: str, value: Any, message: str) -> Cause:
    return Cause(field, "FieldValueInvalid", f"{field}: Invalid value: {_quote(value)}: {message}")


def _required(field: str, message: str = "") -> Cause:
    text = f"{field}: Required value" + (f": {message}" if message else "")
    return Cause(field, "FieldValueRequired", text)


def _forbidden(field: str, message: str) -> Cause:
    return Cause(field, "FieldValueForbidden", f"{field}: Forbidden: {message}")


def check_dns_label(field: str, value: Any) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [_required(field)]
    causes = []
    if len(value) > 63:
        causes.append(_invalid_value(field, value, "must be no more than 63 characters"))
    if not DNS1123_LABEL.fullmatch(value):
        causes.append(_invalid_value(field, value, LABEL_MESSAGE))
    return causes


def check_dns_subdomain(field: str, value: Any) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [_required(field)]
    causes = []
    if len(value) > 253:
        causes.append(_invalid_value(field, value, "must be no more than 253 characters"))
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        causes.append(_invalid_value(field, value, SUBDOMAIN_MESSAGE))
    return causes


def check_labels(field: str, labels: Any) -> list[Cause]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [_invalid_value(field, labels, "must be a map of strings")]
    causes = []
    for key, value in labels.items():
        prefix, slash, name = str(key).rpartition("/")
        if slash and (not prefix or check_dns_subdomain(field, prefix)):
            causes.append(_invalid_value(field, key, "prefix part " + SUBDOMAIN_MESSAGE))
        if len(name) > 63:
            causes.append(
                _invalid_value(field, key, "name part must be no more than 63 characters")
            )
        if not QUALIFIED_NAME.fullmatch(name):
            causes.append(_invalid_value(field, key, QUALIFIED_MESSAGE))
        if not isinstance(value, str):
            causes.append(_invalid_value(field, value, "must be a string"))
            continue
        if len(value) > 63:
            causes.append(_invalid_value(field, value, "must be no more than 63 characters"))
        if value and not QUALIFIED_NAME.fullmatch(value):
            causes.append(_invalid_value(field, value, LABEL_VALUE_MESSAGE))
    return causes


def check_metadata(res: Resource, obj: Obj) -> list[Cause]:
    meta = obj.get("metadata") or {}
    check_name = check_dns_label if res.plural == "jobs" else check_dns_subdomain
    causes = check_name("metadata.name", meta.get("name"))
    causes += check_labels("metadata.labels", meta.get("labels"))
    annotations = meta.get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict)
        or not all(isinstance(v, str) for v in annotations.values())
    ):
        causes.append(_invalid_value("metadata.annotations", annotations, "must be strings"))
    return causes


_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(([eE][-+]?[0-9]+)|[a-zA-Z]*)")
_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (`500m`, `32Gi`, `2`, `1e3`) as a number; ValueError if it is
    not one."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int | float):
        return Decimal(str(value))
    found = _QUANTITY.fullmatch(str(value).strip())
    if not found:
        raise ValueError(value)
    number, suffix, exponent = found.group(1), found.group(2), found.group(3)
    try:
        if exponent:
            return Decimal(number) * (Decimal(10) ** int(exponent[1:]))
        return Decimal(number) * _SUFFIXES[suffix]
    except (KeyError, InvalidOperation) as exc:
        raise ValueError(value) from exc


QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def check_pod_spec(field: str, spec: Any, *, job: bool) -> list[Cause]:
    if not isinstance(spec, dict):
        return [_required(field)]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        causes.append(_required(f"{field}.containers"))
        containers = []
    names = set()
    for index, container in enumerate(containers):
        at = f"{field}.containers[{index}]"
        if not isinstance(container, dict):
            causes.append(_invalid_value(at, container, "must be an object"))
            continue
        causes += check_dns_label(f"{at}.name", container.get("name"))
        if container.get("name") in names:
            causes.append(
                Cause(
                    f"{at}.name",
                    "FieldValueDuplicate",
                    f"{at}.name: Duplicate value: {_quote(container.get('name'))}",
                )
            )
        names.add(container.get("name"))
        if not container.get("image"):
            causes.append(_required(f"{at}.image"))
        for env_index, env in enumerate(container.get("env") or []):
            env_at = f"{at}.env[{env_index}].name"
            if not isinstance(env, dict) or not env.get("name"):
                causes.append(_required(env_at))
            elif not ENV_NAME.fullmatch(env["name"]):
                causes.append(_invalid_value(env_at, env["name"], ENV_NAME_MESSAGE))
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            for resource_name, quantity in (resources.get(kind) or {}).items():
                try:
                    parse_quantity(quantity)
                except ValueError:
                    causes.append(
                        _invalid_value(
                            f"{at}.resources.{kind}[{resource_name}]", quantity, QUANTITY_MESSAGE
                        )
                    )
    policy = spec.get("restartPolicy")
    allowed = ("OnFailure", "Never") if job else ("Always", "OnFailure", "Never")
    supported = ", ".join(_quote(p) for p in allowed)
    if policy is None and job:
        causes.append(_required(f"{field}.restartPolicy", f"valid values: {supported}"))
    elif policy is not None and policy not in allowed:
        causes.append(
            Cause(
                f"{field}.restartPolicy",
                "FieldValueNotSupported",
                f"{field}.restartPolicy: Unsupported value: {_quote(policy)}: supported values: "
                f"{supported}",
            )
        )
    return causes


# --- selectors ----------------------------------------------------------------------------


class Requirement(NamedTuple):
    key: str
    operator: str  # in, notin, exists, !exists, =, !=
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


_SET_REQUIREMENT = re.compile(r"(\S+)\s+(in|notin)\s*\(([^)]*)\)")
_EQUALITY = re.compile(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)")


def parse_label_selector(text: str) -> list[Requirement]:
    """`k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-joined."""
    requirements = []
    for part in _split_top_level(text or ""):
        if found := _SET_REQUIREMENT.fullmatch(part):
            values = tuple(v.strip() for v in found.group(3).split(",") if v.strip())
            requirements.append(Requirement(found.group(1), found.group(2), values))
        elif found := _EQUALITY.fullmatch(part):
            operator = "!=" if found.group(2) == "!=" else "="
            requirements.append(Requirement(found.group(1), operator, (found.group(3),)))
        elif part.startswith("!") and re.fullmatch(r"![^\s=!(),]+", part):
            requirements.append(Requirement(part[1:], "!exists", ()))
        elif re.fullmatch(r"[^\s=!(),]+", part):
            requirements.append(Requirement(part, "exists", ()))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")
    return requirements


FIELD_SELECTORS = {
    "pods": {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "status.phase",
        "status.podIP",
        "spec.serviceAccountName",
    },
    "events": {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "secrets": {"type"},
    "jobs": {"status.successful"},
}


def parse_field_selector(res: Resource, text: str) -> list[tuple[str, str, str]]:
    selectors = []
    for part in _split_top_level(text or ""):
        found = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", part)
        if not found:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, operator, value = found.group(1).strip(), found.group(2), found.group(3).strip()
        if field not in {"metadata.name", "metadata.namespace"} | FIELD_SELECTORS.get(
            res.plural, set()
        ):
            raise bad_request(f"field label not supported: {field}")
        selectors.append((field, "!=" if operator == "!=" else "=", value))
    return selectors


def _field_value(obj: Obj, field: str) -> str:
    if field == "status.successful":
        return str((obj.get("status") or {}).get("succeeded", 0))
    if field == "source":
        return str((obj.get("source") or {}).get("component", ""))
    value: Any = obj
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


# --- patches ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, null removes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    for part in parts[:-1]:
        if isinstance(doc, list):
            doc = doc[int(part)]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            raise ValueError(f"doc is missing path: {path!r}")
    return doc, parts[-1]


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test. ValueError on a failed op."""
    if not isinstance(operations, list):
        raise ValueError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)

    def get(path: str) -> Any:
        value = doc
        for part in _pointer(path):
            try:
                value = value[int(part)] if isinstance(value, list) else value[part]
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                raise ValueError(f"doc is missing path: {path!r}") from exc
        return value

    def remove(path: str) -> Any:
        parent, key = _container(doc, _pointer(path), path)
        try:
            return parent.pop(int(key)) if isinstance(parent, list) else parent.pop(key)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"remove operation does not apply: doc is missing path: {path!r}"
            ) from exc

    def add(path: str, value: Any) -> None:
        nonlocal doc
        parts = _pointer(path)
        if not parts:
            doc = value
            return
        parent, key = _container(doc, parts, path)
        if isinstance(parent, list):
            parent.insert(len(parent) if key == "-" else int(key), value)
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            raise ValueError(f"doc is missing path: {path!r}")

    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            remove(path)
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            add(path, remove(op["from"]))
        elif kind == "copy":
            add(path, copy.deepcopy(get(op["from"])))
        elif kind == "test":
            if get(path) != op.get("value"):
                raise ValueError(f"testing value {path} failed")
        else:
            raise ValueError(f"unexpected kind of operation: {kind!r}")
    return doc


# --- the store ----------------------------------------------------------------------------


def default_node(name: str, gpus: int = 2, labels: dict[str, str] | None = None) -> Obj:
    """A node as the kubelet registers it, with `gpus` nvidia.com/gpu."""
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **({"nvidia.com/gpu.present": "true"} if gpus else {}),
        **(labels or {}),
    }
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": timestamp(),
            "labels": node_labels,
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": timestamp(),
                    "lastTransitionTime": timestamp(),
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "emulated",
                "containerRuntimeVersion": "podman://emulated",
                "kernelVersion": "emulated",
                "kubeProxyVersion": "v1.31.0-emulated",
                "kubeletVersion": "v1.31.0-emulated",
                "machineID": "emulated",
                "operatingSystem": "linux",
                "osImage": "emulated",
                "systemUUID": "emulated",
            },
        },
    }


def _namespace_object(name: str) -> Obj:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": timestamp(),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def owner_uids(obj: Obj) -> list[str]:
    return [ref.get("uid") for ref in (obj["metadata"].get("ownerReferences") or [])]


def controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Store:
    """Every object of the cluster, behind one lock. The controller thread works on the
    stored objects under `lock` (`items`, `put`, `remove`); the HTTP handlers through the
    public methods, which take and give copies. `changed` is set on every write, so the
    controller reacts at once instead of at its next tick."""

    def __init__(self, namespaces: tuple[str, ...] = ("trainyard",)) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Event()
        self._rv = 1
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {r: {} for r in RESOURCES}
        self.by_uid: dict[str, tuple[str, str, str]] = {}
        self.namespaces: dict[str, Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self.deny_set: set[tuple[str, str, str]] = set()
        self.request_log: list[Request] = []
        # Set by the kubelet: (pod, container name, query) -> the log text; ApiError if none.
        self.log_reader: Callable[[Obj, str, dict[str, str]], str] | None = None
        self.reset(namespaces)

    def reset(
        self, namespaces: tuple[str, ...] = ("trainyard",), nodes: list[Obj] | None = None
    ) -> None:
        with self.lock:
            for objects in self.objects.values():
                objects.clear()
            self.by_uid.clear()
            self.namespaces = {ns: _namespace_object(ns) for ns in namespaces}
            self.nodes = {n["metadata"]["name"]: n for n in nodes or [default_node("gpu-node-1")]}
            self.deny_set.clear()
            self.request_log.clear()
            self.changed.set()

    # -- internal access for the controller (caller holds `lock`) --

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def items(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return [
            obj
            for (ns, _), obj in self.objects[resource].items()
            if namespace is None or ns == namespace
        ]

    def lookup(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self.objects[resource].get((namespace, name))

    def by_owner(self, uid: str) -> list[tuple[str, Obj]]:
        return [
            (resource, obj)
            for resource, objects in self.objects.items()
            for obj in objects.values()
            if uid in owner_uids(obj)
        ]

    def exists_uid(self, uid: str) -> bool:
        return uid in self.by_uid

    def object_of_uid(self, uid: str) -> tuple[str, Obj] | None:
        where = self.by_uid.get(uid)
        if where is None:
            return None
        obj = self.objects[where[0]].get((where[1], where[2]))
        return (where[0], obj) if obj is not None else None

    def put(self, resource: str, obj: Obj) -> Obj | None:
        """Store `obj` (new or changed) with a new resourceVersion; nothing if unchanged.
        An object marked deleted with no finalizer left is removed instead. Returns the
        stored object, None once removed."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        old = self.objects[resource].get(key)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")  # a pod's grace: its kubelet ends it
        ):
            self.remove(resource, meta["namespace"], meta["name"])
            return None
        if old is not None:
            probe = dict(
                obj, metadata={**meta, "resourceVersion": old["metadata"]["resourceVersion"]}
            )
            if probe == old:
                return old
        meta["resourceVersion"] = self.next_rv()
        self.objects[resource][key] = obj
        self.by_uid[meta["uid"]] = (resource, key[0], key[1])
        self.changed.set()
        return obj

    def remove(self, resource: str, namespace: str, name: str) -> Obj | None:
        obj = self.objects[resource].pop((namespace, name), None)
        if obj is not None:
            self.by_uid.pop(obj["metadata"]["uid"], None)
            self.next_rv()
            self.changed.set()
        return obj

    def new_metadata(self, res: Resource, namespace: str, meta: Obj) -> Obj:
        meta = dict(meta)
        meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp()
        for field in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(field, None)
        if res.plural == "jobs":
            meta["generation"] = 1
        return meta

    def record_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "kubelet",
        host: str | None = None,
    ) -> None:
        """An Event about `involved` (caller holds `lock`); the same reason and message
        again bumps the existing one's count, as the real event recorder's aggregation."""
        meta = involved["metadata"]
        namespace = meta.get("namespace", "default")
        for event in self.items("events", namespace):
            if (
                event["involvedObject"].get("uid") == meta["uid"]
                and event.get("reason") == reason
                and event.get("message") == message
            ):
                event = copy.deepcopy(event)
                event["count"] = event.get("count", 1) + 1
                event["lastTimestamp"] = timestamp()
                self.put("events", event)
                return
        name = f"{meta['name']}.{secrets.token_hex(8)}"
        source = {"component": component, **({"host": host} if host else {})}
        event = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": timestamp(),
            },
            "involvedObject": {
                "kind": involved.get("kind"),
                "namespace": namespace,
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": involved.get("apiVersion"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": timestamp(),
            "lastTimestamp": timestamp(),
            "count": 1,
            "type": type_,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        self.put("events", event)

    def delete_object(
        self,
        resource: str,
        obj: Obj,
        *,
        propagation: str | None = None,
        grace: int | None = None,
    ) -> Obj | None:
        """Delete as the API does (caller holds `lock`); see the module's docstring. Returns
        the object while it stays (graceful, finalizers), None once it is gone."""
        meta = obj["metadata"]
        policy = propagation or ("Orphan" if resource == "jobs" else "Background")
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        if policy == "Orphan":
            for dep_resource, dependent in self.by_owner(meta["uid"]):
                dependent = copy.deepcopy(dependent)
                dependent["metadata"]["ownerReferences"] = [
                    ref
                    for ref in dependent["metadata"]["ownerReferences"]
                    if ref.get("uid") != meta["uid"]
                ] or None
                if dependent["metadata"]["ownerReferences"] is None:
                    del dependent["metadata"]["ownerReferences"]
                self.put(dep_resource, dependent)
        elif policy == "Foreground" and self.by_owner(meta["uid"]):
            finalizers = meta.setdefault("finalizers", [])
            if FOREGROUND_FINALIZER not in finalizers:
                finalizers.append(FOREGROUND_FINALIZER)
        if resource == "pods":
            spec = obj.get("spec") or {}
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
            if not spec.get("nodeName") or terminal(obj):
                grace = 0  # nothing runs: gone at once
            current = meta.get("deletionGracePeriodSeconds")
            if current is not None and current <= grace:
                return obj  # already going, as soon or sooner
            if grace > 0:
                meta["deletionTimestamp"] = timestamp(now() + timedelta(seconds=grace))
                meta["deletionGracePeriodSeconds"] = grace
                return self.put(resource, obj)
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = timestamp()
        meta["deletionGracePeriodSeconds"] = 0
        return self.put(resource, obj)

    # -- the API's operations (each takes the lock; objects in and out are copies) --

    def resource(self, plural: str) -> Resource:
        return RESOURCES[plural]

    def check_namespace(self, namespace: str) -> None:
        if namespace not in self.namespaces:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    def get(self, plural: str, namespace: str, name: str) -> Obj:
        res = self.resource(plural)
        with self.lock:
            obj = self.lookup(plural, namespace, name)
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(
        self,
        plural: str,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> Obj:
        res = self.resource(plural)
        requirements = parse_label_selector(label_selector)
        fields = parse_field_selector(res, field_selector)
        with self.lock:
            found = []
            for obj in self.items(plural, namespace):
                labels = obj["metadata"].get("labels") or {}
                if not all(r.matches(labels) for r in requirements):
                    continue
                if not all((_field_value(obj, f) == v) == (op == "=") for f, op, v in fields):
                    continue
                found.append(copy.deepcopy(obj))
            found.sort(key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
            return {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": self.resource_version},
                "items": found,
            }

    def create(self, plural: str, namespace: str, body: Any, *, dry_run: bool = False) -> Obj:
        res = self.resource(plural)
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.get("metadata") or {}
        if meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        with self.lock:
            self.check_namespace(namespace)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{random_suffix()}"
            obj["metadata"] = self.new_metadata(res, namespace, meta)
            obj["kind"], obj["apiVersion"] = res.kind, res.api_version
            name = obj["metadata"].get("name") or ""
            causes = check_metadata(res, obj)
            if not obj["metadata"].get("name"):
                causes = [_required("metadata.name", "name or generateName is required")]
            causes += prepare(res, obj, None)
            if causes:
                raise invalid(res, name, causes)
            if self.lookup(plural, namespace, name) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{res.qualified} "{name}" already exists',
                    _details(res, name),
                )
            if dry_run:
                return obj
            self.put(plural, obj)
            return copy.deepcopy(obj)

    def update(
        self,
        plural: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        res = self.resource(plural)
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        with self.lock:
            old = self.lookup(plural, namespace, name)
            if old is None:
                raise not_found(res, name)
            return self._replace(res, old, copy.deepcopy(body), subresource, dry_run)

    def patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        res = self.resource(plural)
        with self.lock:
            old = self.lookup(plural, namespace, name)
            if old is None:
                raise not_found(res, name)
            if content_type == "application/json-patch+json":
                try:
                    new = json_patch(old, body)
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an error in our request: {exc}",
                    ) from exc
            elif content_type in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                if not isinstance(body, dict):
                    raise bad_request("a merge patch is a JSON object")
                new = merge_patch(old, body)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (the emulator has no apply: "
                    f"{content_type})",
                )
            if not isinstance(new, dict):
                raise bad_request("the patch does not give an object")
            # A patch's resourceVersion is a precondition; none means "whatever is stored".
            new_meta = new.setdefault("metadata", {})
            if not (isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion")):
                new_meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self._replace(res, old, new, subresource, dry_run)

    def _replace(
        self, res: Resource, old: Obj, new: Obj, subresource: str | None, dry_run: bool
    ) -> Obj:
        old_meta = old["metadata"]
        name = old_meta["name"]
        meta = new.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        version = meta.get("resourceVersion")
        if version not in (None, "") and version != old_meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                _details(res, name),
            )
        if subresource == "status":
            updated = copy.deepcopy(old)
            updated["status"] = new.get("status")
        else:
            updated = new
            for field in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if field in old_meta:
                    meta[field] = old_meta[field]
                else:
                    meta.pop(field, None)
            updated["metadata"] = meta
            updated["kind"], updated["apiVersion"] = res.kind, res.api_version
            if res.plural in ("jobs", "pods"):
                updated["status"] = copy.deepcopy(old.get("status"))
            if meta.get("deletionTimestamp") and set(meta.get("finalizers") or []) - set(
                old_meta.get("finalizers") or []
            ):
                raise invalid(
                    res,
                    name,
                    [
                        _forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted",
                        )
                    ],
                )
            causes = check_metadata(res, updated) + prepare(res, updated, old)
            if causes:
                raise invalid(res, name, causes)
            if res.plural == "jobs" and updated.get("spec") != old.get("spec"):
                meta["generation"] = old_meta.get("generation", 1) + 1
        if dry_run:
            return updated
        stored = self.put(res.plural, updated)
        return copy.deepcopy(stored if stored is not None else updated)

    def delete(
        self,
        plural: str,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        grace: int | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        res = self.resource(plural)
        if propagation not in (None, "Orphan", "Background", "Foreground"):
            raise bad_request(f"Unsupported propagation policy {propagation!r}")
        with self.lock:
            obj = self.lookup(plural, namespace, name)
            if obj is None:
                raise not_found(res, name)
            for field in ("uid", "resourceVersion"):
                expected = (preconditions or {}).get(field)
                if expected and obj["metadata"].get(field) != expected:
                    raise ApiError(
                        409,
                        "Conflict",
                        f"Precondition failed: {field.capitalize()} in precondition: {expected}, "
                        f"{field.capitalize()} in object meta: {obj['metadata'].get(field)}",
                        _details(res, name),
                    )
            if dry_run:
                return copy.deepcopy(obj)
            stays = self.delete_object(plural, obj, propagation=propagation, grace=grace)
            if stays is not None or plural == "pods":
                return copy.deepcopy(stays if stays is not None else obj)
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {**_details(res, name), "uid": obj["metadata"]["uid"]},
            }

    def delete_collection(
        self,
        plural: str,
        namespace: str,
        label_selector: str,
        field_selector: str,
        propagation: str | None,
        grace: int | None,
    ) -> Obj:
        with self.lock:
            listed = self.list(plural, namespace, label_selector, field_selector)
            for obj in listed["items"]:
                current = self.lookup(plural, namespace, obj["metadata"]["name"])
                if current is not None:
                    self.delete_object(plural, current, propagation=propagation, grace=grace)
            return listed

    def access_review(self, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource = f"{resource}/{attributes['subresource']}"
        denied = self.denied(attributes.get("verb", ""), attributes.get("group", ""), resource)
        status: Obj = {"allowed": not denied}
        if denied:
            status["reason"] = "denied by the emulated cluster's deny set"
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": body.get("spec") or {},
            "status": status,
        }

    def denied(self, verb: str, group: str, resource: str) -> bool:
        with self.lock:
            return any(
                v in (verb, "*") and g in (group, "*") and r in (resource, "*")
                for v, g, r in self.deny_set
            )


# --- defaulting and validation per kind ---------------------------------------------------


def prepare(res: Resource, obj: Obj, old: Obj | None) -> list[Cause]:
    """Default `obj` in place and return what is invalid about it (`old`: the stored
    object an update replaces)."""
    if res.plural == "secrets":
        return _prepare_secret(obj, old)
    if res.plural == "configmaps":
        return _prepare_configmap(obj, old)
    if res.plural == "jobs":
        return _prepare_job(obj, old)
    if res.plural == "pods" and old is not None:
        return _check_pod_update(obj, old)
    return []


def _check_keys(field: str, data: Any) -> list[Cause]:
    if data is None:
        return []
    if not isinstance(data, dict):
        return [_invalid_value(field, data, "must be a map")]
    return [
        _invalid_value(f"{field}[{key}]", key, CONFIG_KEY_MESSAGE)
        for key in data
        if not CONFIG_KEY.fullmatch(str(key)) or len(str(key)) > 253
    ]


def _immutable(obj: Obj, old: Obj | None, fields: tuple[str, ...]) -> list[Cause]:
    if old is None or not old.get("immutable"):
        return []
    return [
        _forbidden(field, "field is immutable when `immutable` is set")
        for field in fields
        if obj.get(field) != old.get(field)
    ]


def _prepare_secret(obj: Obj, old: Obj | None) -> list[Cause]:
    string_data = obj.pop("stringData", None) or {}
    obj.setdefault("type", "Opaque")
    causes = _check_keys("data", obj.get("data")) + _check_keys("stringData", string_data)
    data = dict(obj.get("data") or {})
    size = 0
    for key, value in data.items():
        try:
            size += len(base64.b64decode(str(value), validate=True))
        except (binascii.Error, ValueError):
            causes.append(_invalid_value(f"data[{key}]", "<value omitted>", "illegal base64 data"))
    for key, value in string_data.items():
        encoded = str(value).encode()
        size += len(encoded)
        data[key] = base64.b64encode(encoded).decode()
    if data:
        obj["data"] = data
    if size > MAX_CONFIG_BYTES:
        causes.append(
            Cause(
                "data",
                "FieldValueTooLong",
                f"data: Too long: must have at most {MAX_CONFIG_BYTES} bytes",
            )
        )
    if old is not None and obj.get("type") != old.get("type"):
        causes.append(_invalid_value("type", obj.get("type"), "field is immutable"))
    return causes + _immutable(obj, old, ("data", "immutable"))


def _prepare_configmap(obj: Obj, old: Obj | None) -> list[Cause]:
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    causes = _check_keys("data", obj.get("data")) + _check_keys("binaryData", obj.get("binaryData"))
    size = 0
    for key, value in data.items():
        if not isinstance(value, str):
            causes.append(_invalid_value(f"data[{key}]", value, "must be a string"))
            continue
        size += len(value.encode())
        if key in binary:
            causes.append(
                _invalid_value(f"data[{key}]", key, "duplicate of key present in binaryData")
            )
    for key, value in binary.items():
        try:
            size += len(base64.b64decode(str(value), validate=True))
        except (binascii.Error, ValueError):
            causes.append(
                _invalid_value(f"binaryData[{key}]", "<value omitted>", "illegal base64 data")
            )
    if size > MAX_CONFIG_BYTES:
        causes.append(
            Cause(
                "data",
                "FieldValueTooLong",
                f"[]: Too long: must have at most {MAX_CONFIG_BYTES} bytes",
            )
        )
    return causes + _immutable(obj, old, ("data", "binaryData", "immutable"))


def image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    tagged = ":" in last.split("@", 1)[0]
    return (
        "Always" if "@" not in last and (not tagged or last.endswith(":latest")) else "IfNotPresent"
    )


def default_pod_spec(spec: Obj) -> None:
    """The API server's defaults for a pod spec (a Job's template's too)."""
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in spec.get("containers") or []:
        if not isinstance(container, dict):
            continue
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", image_pull_policy(str(container.get("image", ""))))
        container.setdefault("resources", {})


def _prepare_job(obj: Obj, old: Obj | None) -> list[Cause]:
    meta = obj["metadata"]
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    template = spec.get("template")
    if not isinstance(template, dict):
        return [_required("spec.template")]
    pod_spec = template.get("spec")
    causes = check_pod_spec("spec.template.spec", pod_spec, job=True)
    if causes:
        return causes
    for field, default in (
        ("parallelism", 1),
        ("completions", 1),
        ("backoffLimit", 6),
        ("completionMode", "NonIndexed"),
        ("suspend", False),
        ("manualSelector", None),
    ):
        if default is not None:
            spec.setdefault(field, default)
    for field in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        value = spec.get(field)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            causes.append(
                _invalid_value(f"spec.{field}", value, "must be greater than or equal to 0")
            )
    policy = spec.get("podFailurePolicy")
    spec.setdefault("podReplacementPolicy", "Failed" if policy else "TerminatingOrFailed")
    if policy and pod_spec.get("restartPolicy") != "Never":
        causes.append(
            _invalid_value(
                "spec.template.spec.restartPolicy",
                pod_spec.get("restartPolicy"),
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    for index, rule in enumerate((policy or {}).get("rules") or []):
        if rule.get("action") not in ("FailJob", "FailIndex", "Ignore", "Count"):
            causes.append(
                Cause(
                    f"spec.podFailurePolicy.rules[{index}].action",
                    "FieldValueNotSupported",
                    f"spec.podFailurePolicy.rules[{index}].action: Unsupported "
                    f"value: {_quote(rule.get('action'))}: supported values: "
                    '"Count", "FailIndex", "FailJob", "Ignore"',
                )
            )
    uid = meta["uid"]
    selector_labels = {"batch.kubernetes.io/controller-uid": uid}
    if old is None:
        obj["status"] = {}  # a new Job's status is the job controller's to write
        spec.setdefault("selector", {"matchLabels": selector_labels})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": uid,
                "job-name": meta["name"],
            }
        )
        meta.setdefault("labels", {})
        meta["labels"].setdefault("batch.kubernetes.io/controller-uid", uid)
        meta["labels"].setdefault("batch.kubernetes.io/job-name", meta["name"])
        meta["labels"].setdefault("controller-uid", uid)
        meta["labels"].setdefault("job-name", meta["name"])
    default_pod_spec(pod_spec)
    causes += check_labels(
        "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
    )
    if old is not None:
        old_spec = old.get("spec") or {}
        if spec.get("selector") != old_spec.get("selector"):
            causes.append(
                _invalid_value("spec.selector", spec.get("selector"), "field is immutable")
            )
        if spec.get("completions") != old_spec.get("completions"):
            causes.append(
                _invalid_value("spec.completions", spec.get("completions"), "field is immutable")
            )
        if template != old_spec.get("template") and not old_spec.get("suspend"):
            causes.append(_invalid_value("spec.template", "<template>", "field is immutable"))
    return causes


POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _check_pod_update(obj: Obj, old: Obj) -> list[Cause]:
    spec, old_spec = copy.deepcopy(obj.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
    gates = [g.get("name") for g in spec.pop("schedulingGates", None) or []]
    old_gates = [g.get("name") for g in old_spec.pop("schedulingGates", None) or []]
    causes = []
    for gate in gates:
        if gate not in old_gates:
            causes.append(
                _forbidden(
                    "spec.schedulingGates",
                    f"only deletion is allowed, but found new scheduling gate '{gate}'",
                )
            )
    if gates and old_spec.get("nodeName"):
        causes.append(_forbidden("spec.schedulingGates", "the pod is already scheduled"))
    for one in (spec, old_spec):
        one.pop("activeDeadlineSeconds", None)
        for container in one.get("containers") or []:
            container.pop("image", None)
    old_tolerations = old_spec.pop("tolerations", None) or []
    tolerations = spec.pop("tolerations", None) or []
    if any(t not in tolerations for t in old_tolerations):
        causes.append(
            _forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )
        )
    if spec != old_spec:
        causes.append(_forbidden("spec", POD_UPDATE_MESSAGE))
    return causes


# --- HTTP ---------------------------------------------------------------------------------


def _discovery(res: Resource) -> Obj:
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update"]
    if not res.creatable:
        verbs = ["delete", "deletecollection", "get", "list", "patch"]
    return {
        "name": res.plural,
        "singularName": res.kind.lower(),
        "namespaced": True,
        "kind": res.kind,
        "verbs": verbs,
    }


class ApiServer:
    """The store behind a ThreadingHTTPServer on 127.0.0.1 (a port of its own), in a daemon
    thread. `url`, `token`, `store`."""

    def __init__(self, store: Store, token: str | None = None, user: str | None = None) -> None:
        self.store = store
        self.token = token or secrets.token_urlsafe(24)
        self.user = user or "system:serviceaccount:trainyard:trainyard"
        server = self

        class Handler(_Handler):
            api = server

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="kube-apiserver", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    # -- routing --

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[int, Any]:
        """(HTTP status, JSON payload or text) for one request; ApiError for an error."""
        parts = [p for p in path.split("/") if p]
        if query.get("watch") in ("true", "1") or "watch" in parts[:4]:
            raise ApiError(
                405, "MethodNotAllowed", "watch is not supported by the emulated API server"
            )
        if parts == ["version"]:
            return 200, VERSION
        if parts == ["api"]:
            return 200, {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.url[7:]}
                ],
            }
        if parts == ["apis"]:
            groups = [("batch", "v1"), ("networking.k8s.io", "v1"), ("authorization.k8s.io", "v1")]
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                        "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                    }
                    for g, v in groups
                ],
            }
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if version != "v1":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest and method == "GET":
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/v1" if group else "v1",
                "resources": [_discovery(r) for r in RESOURCES.values() if r.group == group],
            }
        body_json = self._json(body) if body else None
        if group == "authorization.k8s.io":
            if rest == ["selfsubjectaccessreviews"] and method == "POST":
                return 201, self.store.access_review(body_json)
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if group == "" and rest[:1] == ["nodes"]:
            return self._nodes(method, rest[1:])
        if group == "" and rest[:1] == ["namespaces"] and len(rest) <= 2:
            return self._namespaces(method, rest[1:])
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, plural, tail = rest[1], rest[2], rest[3:]
        elif len(rest) == 1:
            namespace, plural, tail = None, rest[0], []
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = GROUP_RESOURCES.get((group, plural))
        if (
            res is None
            or len(tail) > 2
            or (len(tail) == 2 and (plural, tail[1]) not in SUBRESOURCES)
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = tail[0] if tail else None
        subresource = tail[1] if len(tail) == 2 else None
        verb = _verb(method, name)
        self._authorize(verb, res, name, namespace, subresource)
        return self._resource(method, res, namespace, name, subresource, query, headers, body_json)

    def _authorize(
        self,
        verb: str,
        res: Resource,
        name: str | None,
        namespace: str | None,
        subresource: str | None = None,
    ) -> None:
        resource = f"{res.plural}/{subresource}" if subresource else res.plural
        if not self.store.denied(verb, res.group, resource):
            return
        what = f'{res.qualified} "{name}"' if name else res.qualified
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        raise ApiError(
            403,
            "Forbidden",
            f'{what} is forbidden: User "{self.user}" cannot {verb} resource "{resource}" in '
            f'API group "{res.group}"{where}',
            _details(res, name or ""),
        )

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body)
        except ValueError as exc:
            raise bad_request(f"the body of the request is not JSON: {exc}") from exc

    def _nodes(self, method: str, rest: list[str]) -> tuple[int, Any]:
        node_res = Resource("nodes", "Node")
        verb = _verb(method, rest[0] if rest else None)
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", "the emulated cluster's nodes are read-only")
        self._authorize(verb, node_res, rest[0] if rest else None, None)
        with self.store.lock:
            if not rest:
                return 200, {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": self.store.resource_version},
                    "items": copy.deepcopy(list(self.store.nodes.values())),
                }
            node = self.store.nodes.get(rest[0])
            if node is None or len(rest) > 1:
                raise not_found(node_res, rest[0])
            return 200, copy.deepcopy(node)

    def _namespaces(self, method: str, rest: list[str]) -> tuple[int, Any]:
        ns_res = Resource("namespaces", "Namespace")
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", "the emulated cluster's namespaces are fixed")
        self._authorize(
            _verb(method, rest[0] if rest else None), ns_res, rest[0] if rest else None, None
        )
        with self.store.lock:
            if not rest:
                return 200, {
                    "kind": "NamespaceList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": self.store.resource_version},
                    "items": copy.deepcopy(list(self.store.namespaces.values())),
                }
            namespace = self.store.namespaces.get(rest[0])
            if namespace is None:
                raise not_found(ns_res, rest[0])
            return 200, copy.deepcopy(namespace)

    def _resource(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
        query: dict[str, str],
        headers: Any,
        body: Any,
    ) -> tuple[int, Any]:
        store = self.store
        dry_run = query.get("dryRun") == "All"
        if namespace is None:
            if method != "GET" or name is not None:
                raise ApiError(405, "MethodNotAllowed", "only lists are served across namespaces")
            return 200, store.list(
                res.plural, None, query.get("labelSelector", ""), query.get("fieldSelector", "")
            )
        if name is None:
            if method == "GET":
                return 200, store.list(
                    res.plural,
                    namespace,
                    query.get("labelSelector", ""),
                    query.get("fieldSelector", ""),
                )
            if method == "POST":
                if not res.creatable:
                    raise ApiError(
                        405,
                        "MethodNotAllowed",
                        f"the emulated cluster's {res.plural} are made by its controllers only",
                    )
                return 201, store.create(res.plural, namespace, body, dry_run=dry_run)
            if method == "DELETE":
                propagation, grace, _ = _delete_options(query, body)
                return 200, store.delete_collection(
                    res.plural,
                    namespace,
                    query.get("labelSelector", ""),
                    query.get("fieldSelector", ""),
                    propagation,
                    grace,
                )
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if subresource == "log":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "a log is only read")
            pod = store.get("pods", namespace, name)
            container = query.get("container") or pod["spec"]["containers"][0]["name"]
            if store.log_reader is None:
                raise bad_request("no kubelet serves logs")
            return 200, store.log_reader(pod, container, query)
        if method == "GET":
            return 200, store.get(res.plural, namespace, name)
        if method == "PUT":
            if not res.creatable and subresource != "status":
                raise ApiError(405, "MethodNotAllowed", f"{res.plural} are patched, not replaced")
            return 200, store.update(
                res.plural, namespace, name, body, subresource=subresource, dry_run=dry_run
            )
        if method == "PATCH":
            content_type = (headers.get("Content-Type") or "").split(";")[0].strip()
            return 200, store.patch(
                res.plural,
                namespace,
                name,
                content_type,
                body,
                subresource=subresource,
                dry_run=dry_run,
            )
        if method == "DELETE" and subresource is None:
            propagation, grace, preconditions = _delete_options(query, body)
            return 200, store.delete(
                res.plural,
                namespace,
                name,
                propagation=propagation,
                grace=grace,
                preconditions=preconditions,
                dry_run=dry_run,
            )
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")


def _verb(method: str, name: str | None) -> str:
    if method == "GET":
        return "get" if name else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _delete_options(query: dict[str, str], body: Any) -> tuple[str | None, int | None, Obj | None]:
    """propagationPolicy, gracePeriodSeconds and preconditions, from the query or a
    DeleteOptions body (the python client may send either; the query wins)."""
    options = body if isinstance(body, dict) else {}
    propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
    if propagation is None and "orphanDependents" in (query | options):
        orphan = str((query | options)["orphanDependents"]).lower() == "true"
        propagation = "Orphan" if orphan else "Background"
    grace_text = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
    try:
        grace = None if grace_text is None else max(0, int(grace_text))
    except (TypeError, ValueError) as exc:
        raise bad_request(f"gracePeriodSeconds: {grace_text!r} is not a number") from exc
    return propagation, grace, options.get("preconditions")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        store = self.api.store
        with store.lock:
            store.request_log.append(Request(self.command, split.path, query))
        try:
            if self.headers.get("Authorization") != f"Bearer {self.api.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            code, payload = self.api.handle(self.command, split.path, query, self.headers, body)
        except ApiError as exc:
            code, payload = exc.code, exc.status()
        except Exception as exc:  # an emulator bug: a 500 the test sees, not a hung client
            code = 500
            payload = ApiError(500, "InternalError", f"emulator error: {exc!r}").status()
        if isinstance(payload, str):
            data, content_type = payload.encode(), "text/plain"
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
