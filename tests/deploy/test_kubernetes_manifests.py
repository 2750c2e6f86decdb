"""deploy/kubernetes: every kustomization renders with `kubectl kustomize`, every rendered
document passes the Kubernetes API's schemas in strict mode, and the properties a
deployment relies on hold in every render. No cluster: rendering and validation only."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from apps.jobs.shell.hostkey import load_or_create

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
DOCS = ROOT / "docs" / "deploy-kubernetes.md"
BASE = KUBERNETES / "base"
SECRET_EXAMPLE = KUBERNETES / "secret.example.env"
# The oldest Kubernetes the manifests claim, and the newest whose schemas the package ships.
SCHEMA_VERSIONS = ("1.31", kubernetes_validate.latest_version())
# Components and `labels:` need kustomize 5 (kubectl 1.27 or later); tested with 5.5.0.
MIN_KUSTOMIZE = (5, 0)
SECRET_NAME = "trainyard-secrets"
# What settings refuse to start without when DEBUG=0, and the URLs that carry passwords.
REQUIRED_SECRETS = {"SECRET_KEY", "SECRETS_KEYS", "DATABASE_URL", "REDIS_URL"}
# A name with one of these in it holds a secret: it may come only from a Secret.
SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "KEY", "CREDENTIAL", "DATABASE_URL", "REDIS_URL")
POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
# The SSH gateway's host key: a Secret the operator makes once, mounted as a file (never in
# the environment). SSH_GATEWAY_HOST_KEY names that file: a path, though "KEY" is in its name.
SSH_HOST_KEY_SECRET = "trainyard-ssh-host-key"
SSH_HOST_KEY_ITEM = "host_ed25519"
SECRET_FILE_SETTINGS = {"SSH_GATEWAY_HOST_KEY"}
# What web and the gateway must read alike: the port and host web shows in the ssh command
# are where the gateway is, and the fingerprint web shows is the key the gateway serves.
SSH_SHARED_SETTINGS = ("SSH_GATEWAY_PORT", "SSH_GATEWAY_HOST", "SSH_GATEWAY_HOST_KEY")
# The renders that publish the gateway through components/ssh-loadbalancer.
SSH_LOADBALANCED = {"overlays/ssh-loadbalancer-example", "operator-overlay"}
# The directories the pods may write to; the root filesystem is read-only.
WRITABLE = {"/tmp", "/app/var"}
# What an operator who runs their own PostgreSQL and Redis behind ingress-nginx writes: the
# combination docs/deploy-kubernetes.md shows, rendered as well (with their own image).
OPERATOR_IMAGE = "registry.internal/ops/trainyard:1.2.3"
OPERATOR_OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: trainyard
resources:
  - {overlays}/external-services
components:
  - {components}/ingress-nginx
  - {components}/ssh-loadbalancer
images:
  - name: trainyard
    newName: registry.internal/ops/trainyard
    newTag: "1.2.3"
configMapGenerator:
  - name: trainyard-config
    behavior: merge
    literals:
      - ALLOWED_HOSTS=trainyard.your.org,localhost
      - CSRF_TRUSTED_ORIGINS=https://trainyard.your.org
      - TRAINYARD_PUBLIC_URL=https://trainyard.your.org
      - S3_BUCKET=your-bucket
      - S3_REGION=eu-central-1
      - SSH_GATEWAY_HOST=ssh.trainyard.your.org
"""

Doc = dict[str, Any]


def _kustomizations() -> list[Path]:
    return sorted(p.parent for p in KUBERNETES.rglob("kustomization.yaml"))


def _kind(directory: Path) -> str:
    return yaml.safe_load((directory / "kustomization.yaml").read_text()).get("kind", "")


RENDERABLE = [d for d in _kustomizations() if _kind(d) != "Component"]
COMPONENTS = [d for d in _kustomizations() if _kind(d) == "Component"]
TARGETS = [str(d.relative_to(KUBERNETES)) for d in RENDERABLE] + ["operator-overlay"]


@functools.cache
def _kubectl() -> str:
    """kubectl's path, once its kustomize is known to be new enough; else the test fails."""
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl is not on PATH: these tests render deploy/kubernetes with `kubectl "
            "kustomize` (Debian: apt-get install kubernetes-client; .ci/run installs it)",
            pytrace=False,
        )
    result = subprocess.run(
        [path, "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = (
        json.loads(result.stdout or "{}").get("kustomizeVersion", "")
        if result.returncode == 0
        else ""
    )
    version = tuple(int(n) for n in re.findall(r"\d+", found)[:2])
    if version < MIN_KUSTOMIZE:
        pytest.fail(
            f"{path}'s kustomize is {found or 'unknown (too old to say)'}: deploy/kubernetes "
            f"needs kustomize {'.'.join(map(str, MIN_KUSTOMIZE))} or later (kubectl 1.27+); "
            "Debian 12's kubernetes-client (kubectl 1.20) is too old",
            pytrace=False,
        )
    return path


def _run_kubectl(*args: str) -> str:
    result = subprocess.run(
        [_kubectl(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"kubectl {shlex.join(args)} failed:\n{result.stderr}"
    return result.stdout


def _kustomize(directory: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(_run_kubectl("kustomize", str(directory))) if d]


@functools.cache
def _render(target: str) -> tuple[Doc, ...]:
    """The documents of one render (cached: each directory is rendered once per run)."""
    if target != "operator-overlay":
        return tuple(_kustomize(KUBERNETES / target))
    # Out of the tree, as an operator's own overlay would be (kustomize wants relative paths).
    directory = Path(tempfile.mkdtemp(prefix="trainyard-kustomize-"))
    try:
        (directory / "kustomization.yaml").write_text(
            OPERATOR_OVERLAY.format(
                overlays=os.path.relpath(KUBERNETES / "overlays", directory),
                components=os.path.relpath(KUBERNETES / "components", directory),
            )
        )
        return tuple(_kustomize(directory))
    finally:
        shutil.rmtree(directory)


def _named(docs: tuple[Doc, ...], kind: str, component: str) -> Doc:
    found = [
        d
        for d in docs
        if d["kind"] == kind
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {kind} of component {component}, found {len(found)}"
    return found[0]


def _pod_spec(doc: Doc) -> Doc:
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    return spec["template"]["spec"]


def _pod_templates(docs: tuple[Doc, ...]) -> Iterator[tuple[str, Doc, Doc]]:
    """(kind/name, the template's labels, its pod spec) of every workload."""
    for doc in docs:
        if doc["kind"] in POD_KINDS:
            spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
            labels = spec["template"]["metadata"].get("labels", {})
            yield f"{doc['kind']}/{doc['metadata']['name']}", labels, _pod_spec(doc)


def _containers(pod: Doc) -> list[Doc]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector matches these labels (an empty selector matches all)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        matched = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not matched:
            return False
    return True


def _config(docs: tuple[Doc, ...]) -> dict[str, str]:
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    assert len(maps) == 1, "expected one ConfigMap (trainyard-config)"
    return maps[0]["data"]


def _container(docs: tuple[Doc, ...], component: str) -> Doc:
    """The main container of a component's Deployment (the one named like the component)."""
    pod = _pod_spec(_named(docs, "Deployment", component))
    return next(c for c in pod["containers"] if c["name"] == component)


def _environment(docs: tuple[Doc, ...], container: Doc) -> dict[str, str]:
    """The variables a container gets from the ConfigMap and its own `env` values, as the
    kubelet resolves them (later sources win; secret references are left out)."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            environment.update(maps[source["configMapRef"]["name"]])
    for env in container.get("env", []):
        if "value" in env:
            environment[env["name"]] = env["value"]
        else:
            environment.pop(env["name"], None)
    return environment


def _port_number(container: Doc, port: int | str) -> int:
    """A probe's or Service's port (a number, or the name of one of the container's ports)."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"{container['name']} has no port named {port}"
    return named[port]


def _secret_volumes(pod: Doc) -> dict[str, Doc]:
    return {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}


def test_kubectl_is_installed():
    assert Path(_kubectl()).exists()


@pytest.mark.parametrize("target", TARGETS)
def test_every_document_passes_the_kubernetes_schemas_in_strict_mode(target: str):
    docs = _render(target)
    assert docs, f"{target} rendered nothing"
    errors = []
    for doc in docs:
        for version in SCHEMA_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.absolute_path)
                errors.append(
                    f"{doc['kind']}/{doc['metadata']['name']} ({version}): {where}: {exc.message}"
                )
            except kubernetes_validate.SchemaNotFoundError as exc:
                errors.append(exc.message)
    assert errors == []


@pytest.mark.parametrize("target", TARGETS)
def test_beat_is_one_replica_replaced_by_recreate(target: str):
    docs = _render(target)
    beat = _named(docs, "Deployment", "beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert not [
        d
        for d in docs
        if d["kind"] == "HorizontalPodAutoscaler"
        and d["spec"]["scaleTargetRef"]["name"] == beat["metadata"]["name"]
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_has_requests_and_limits(target: str):
    missing = [
        f"{name}/{container['name']}"
        for name, _, pod in _pod_templates(_render(target))
        for container in _containers(pod)
        if not all(
            container.get("resources", {}).get(part, {}).get(resource)
            for part in ("requests", "limits")
            for resource in ("cpu", "memory")
        )
    ]
    assert missing == []


@pytest.mark.parametrize("target", TARGETS)
def test_web_is_probed_on_healthz_as_a_host_django_allows(target: str):
    docs = _render(target)
    web = _pod_spec(_named(docs, "Deployment", "web"))
    container = next(c for c in web["containers"] if c["name"] == "web")
    assert "uvicorn" in container["command"] and "config.asgi:application" in container["command"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    allowed_hosts = _config(docs)["ALLOWED_HOSTS"].split(",")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check = container[probe]["httpGet"]
        assert check["path"] == "/healthz", probe
        assert check["port"] in ports or check["port"] in ports.values(), probe
        headers = {h["name"]: h["value"] for h in check.get("httpHeaders", [])}
        # DEBUG=0: another Host is answered 400 and plain HTTP a redirect, never /healthz.
        assert headers.get("Host") in allowed_hosts, probe
        assert headers.get("X-Forwarded-Proto") == "https", probe
    service = _named(docs, "Service", "web")
    assert _selects(
        {"matchLabels": service["spec"]["selector"]},
        _named(docs, "Deployment", "web")["spec"]["template"]["metadata"]["labels"],
    )


@pytest.mark.parametrize("target", TARGETS)
def test_secrets_come_only_from_the_secret_by_reference(target: str):
    docs = _render(target)
    assert not [d for d in docs if d["kind"] == "Secret"], "a Secret is rendered: values in git"
    config = _config(docs)
    leaks = [key for key in config if _looks_secret(key) and key not in SECRET_FILE_SETTINGS]
    assert leaks == [], f"secret-looking keys in the ConfigMap: {leaks}"
    # Those may be here only as the path of a file (a Secret volume: the host key test).
    for key in SECRET_FILE_SETTINGS & set(config):
        assert config[key].startswith("/") and "\n" not in config[key], f"{key} is not a path"
    for name, _, pod in _pod_templates(docs):
        for container in _containers(pod):
            where = f"{name}/{container['name']}"
            for env in container.get("env", []):
                if _looks_secret(env["name"]):
                    assert "value" not in env, f"{where}: {env['name']} has a value"
                    assert "secretKeyRef" in env.get("valueFrom", {}), f"{where}: {env['name']}"
            secret_refs = [
                e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e
            ]
            assert secret_refs == [SECRET_NAME], f"{where} reads {secret_refs}"
        # The only Secret mounted as files is the SSH gateway's host key.
        for volume in _secret_volumes(pod).values():
            assert volume["secretName"] == SSH_HOST_KEY_SECRET, name


def test_no_kustomization_generates_a_secret():
    for directory in _kustomizations():
        assert "secretGenerator" not in yaml.safe_load(
            (directory / "kustomization.yaml").read_text()
        )


def test_the_secret_example_names_every_key_and_holds_no_value():
    keys = {}
    for line in SECRET_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            keys[key] = value
    assert set(keys) >= REQUIRED_SECRETS
    assert all(_looks_secret(key) for key in keys)
    assert {k: v for k, v in keys.items() if v} == {}
    # The documented command accepts it, and the Secret it makes is valid.
    secret = yaml.safe_load(
        _run_kubectl(
            "create",
            "secret",
            "generic",
            SECRET_NAME,
            f"--from-env-file={SECRET_EXAMPLE}",
            "--dry-run=client",
            "-o",
            "yaml",
        )
    )
    assert set(secret["data"]) == set(keys)
    secret["metadata"].pop("creationTimestamp", None)
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(secret, version, strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_no_pod_mounts_a_service_account_token(target: str):
    docs = _render(target)
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts, "no ServiceAccount"
    for account in accounts.values():
        assert account["automountServiceAccountToken"] is False
    for name, _, pod in _pod_templates(docs):
        assert pod.get("serviceAccountName") in accounts, name
        assert pod.get("automountServiceAccountToken") is False, name


@pytest.mark.parametrize("target", TARGETS)
def test_network_policies_select_every_pod(target: str):
    docs = _render(target)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert any(
        p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
        for p in policies
    ), "no default deny of ingress for the namespace"
    for name, labels, _ in _pod_templates(docs):
        for direction in ("Ingress", "Egress"):
            assert [
                p
                for p in policies
                if direction in p["spec"]["policyTypes"]
                and _selects(p["spec"]["podSelector"], labels)
            ], f"no {direction} NetworkPolicy selects {name}"
        allowed = {
            port.get("port")
            for p in policies
            if "Egress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], labels)
            for rule in p["spec"].get("egress", [])
            for port in rule.get("ports", [])
        }
        assert {53, 5432, 6379} <= allowed, f"{name} may not reach DNS, PostgreSQL and Redis"
    web = _named(docs, "Deployment", "web")["spec"]["template"]["metadata"]["labels"]
    assert [
        rule
        for p in policies
        if "Ingress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], web)
        for rule in p["spec"].get("ingress", [])
        if [port for port in rule.get("ports", []) if port["port"] in ("http", 8000)]
    ], "nothing may reach web on its port"


@pytest.mark.parametrize("target", TARGETS)
def test_the_migrate_job_runs_migrate(target: str):
    job = _named(_render(target), "Job", "migrate")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-3:] == ["manage.py", "migrate", "--noinput"]


def test_the_image_is_set_once():
    entries = [
        (directory, image)
        for directory in _kustomizations()
        for image in yaml.safe_load((directory / "kustomization.yaml").read_text()).get(
            "images", []
        )
    ]
    assert [(d, i["name"]) for d, i in entries] == [(BASE, "trainyard")]
    named = set()
    for manifest in KUBERNETES.rglob("*.yaml"):
        named |= set(re.findall(r"^\s*image:\s*(\S+)", manifest.read_text(), re.MULTILINE))
    assert named == {"trainyard"}, "a manifest names an image other than `trainyard`"


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_runs_one_image(target: str):
    images = {
        container["image"]
        for _, _, pod in _pod_templates(_render(target))
        for container in _containers(pod)
    }
    expected = OPERATOR_IMAGE if target == "operator-overlay" else "trainyard:0.1.0"
    assert images == {expected}


@pytest.mark.parametrize("target", TARGETS)
def test_pods_run_unprivileged_on_a_read_only_root(target: str):
    for name, _, pod in _pod_templates(_render(target)):
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] > 0, name
        for container in _containers(pod):
            where = f"{name}/{container['name']}"
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            assert security["readOnlyRootFilesystem"] is True, where
            mounted = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert mounted >= WRITABLE, f"{where} has nowhere to write"


@pytest.mark.parametrize("target", TARGETS)
def test_disruption_budgets_cover_web_worker_and_the_gateway_not_beat(target: str):
    docs = _render(target)
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    covered = {
        component
        for component in ("web", "worker", "beat", "ssh-gateway")
        for budget in budgets
        if _selects(
            budget["spec"]["selector"],
            _named(docs, "Deployment", component)["spec"]["template"]["metadata"]["labels"],
        )
    }
    assert covered == {"web", "worker", "ssh-gateway"}
    # No budget blocks a node drain: minAvailable below the replicas it covers.
    for budget in budgets:
        for deployment in (d for d in docs if d["kind"] == "Deployment"):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            if _selects(budget["spec"]["selector"], labels) and "minAvailable" in budget["spec"]:
                assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"], (
                    f"{budget['metadata']['name']} would block drains of "
                    f"{deployment['metadata']['name']}"
                )


@pytest.mark.parametrize("target", TARGETS)
def test_labels_and_namespace_are_consistent(target: str):
    docs = _render(target)
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "trainyard", where
        assert labels.get("app.kubernetes.io/part-of") == "trainyard", where
        assert doc["metadata"].get("namespace") == "trainyard", where
    for name, labels, _ in _pod_templates(docs):
        assert labels.get("app.kubernetes.io/component"), name


def test_the_worker_takes_the_queues_of_the_procfile():
    procfile = dict(
        line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )

    def queues(argv: list[str]) -> list[str]:
        return [argv[i + 1] for i, a in enumerate(argv) if a in ("-Q", "--queues")]

    worker = _named(_render("base"), "Deployment", "worker")
    command = _pod_spec(worker)["containers"][0]["command"]
    assert command[:4] == ["celery", "-A", "config", "worker"]
    assert queues(command) == queues(shlex.split(procfile["worker"]))


def test_every_component_is_used_by_an_overlay():
    used = {
        (directory / path).resolve()
        for directory in RENDERABLE
        for path in yaml.safe_load((directory / "kustomization.yaml").read_text()).get(
            "components", []
        )
    }
    assert set(COMPONENTS) <= used


def test_the_ssh_gateway_runs_the_procfiles_command():
    procfile = dict(
        line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    command = _container(_render("base"), "ssh-gateway")["command"]
    # No --port or --bind: those come from the ConfigMap, which web reads too.
    assert command == shlex.split(procfile["ssh"])


@pytest.mark.parametrize("target", TARGETS)
def test_the_ssh_gateway_is_one_rolling_replica(target: str):
    gateway = _named(_render(target), "Deployment", "ssh-gateway")
    assert gateway["spec"]["replicas"] == 1
    # Two at once are fine (unlike beat): the new pod is ready before the old one goes.
    assert gateway["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    # Not PID 1, so that SIGTERM (which it has no handler for) ends it.
    assert _pod_spec(gateway)["shareProcessNamespace"] is True
    inits = [c["name"] for c in _pod_spec(gateway).get("initContainers", [])]
    assert inits == ["wait-for-migrations"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_ssh_host_key_is_a_secret_file_mounted_read_only_and_not_optional(target: str):
    docs = _render(target)
    path = _config(docs)["SSH_GATEWAY_HOST_KEY"]
    holders = set()
    for name, labels, pod in _pod_templates(docs):
        volumes = {
            volume_name
            for volume_name, secret in _secret_volumes(pod).items()
            if secret["secretName"] == SSH_HOST_KEY_SECRET
        }
        if not volumes:
            continue
        holders.add(labels["app.kubernetes.io/component"])
        for volume_name in volumes:
            secret = _secret_volumes(pod)[volume_name]
            # A missing Secret (or key) keeps the pod from starting, saying which: never a key
            # made by each pod, which would change on every restart.
            assert secret["optional"] is False, name
            assert secret["items"] == [{"key": SSH_HOST_KEY_ITEM, "path": SSH_HOST_KEY_ITEM}]
            assert secret["defaultMode"] & 0o007 == 0, f"{name}: others may read the host key"
        for container in _containers(pod):
            mounts = [m for m in container.get("volumeMounts", []) if m["name"] in volumes]
            for mount in mounts:
                assert mount.get("readOnly") is True, f"{name}/{container['name']}"
            if container in pod["containers"]:
                assert [f"{m['mountPath']}/{SSH_HOST_KEY_ITEM}" for m in mounts] == [path], (
                    f"{name}/{container['name']}: SSH_GATEWAY_HOST_KEY is not the mounted key"
                )
    # The gateway serves the key, web shows its fingerprint; nothing else holds it.
    assert holders == {"ssh-gateway", "web"}


@pytest.mark.parametrize("target", TARGETS)
def test_the_ssh_gateway_is_probed_on_its_port(target: str):
    docs = _render(target)
    config = _config(docs)
    container = _container(docs, "ssh-gateway")
    assert [p["containerPort"] for p in container["ports"]] == [int(config["SSH_GATEWAY_PORT"])]
    # It must take connections from the Service, and healthcheck connects to 127.0.0.1.
    assert config["SSH_GATEWAY_BIND"] == "0.0.0.0"
    for probe in ("startupProbe", "readinessProbe"):
        port = container[probe]["tcpSocket"]["port"]
        assert _port_number(container, port) == int(config["SSH_GATEWAY_PORT"]), probe
    # Liveness: the SSH greeting on SSH_GATEWAY_PORT (a wedged server still accepts).
    assert container["livenessProbe"]["exec"]["command"] == [
        "python",
        "manage.py",
        "healthcheck",
        "ssh",
    ]
    assert container["livenessProbe"]["timeoutSeconds"] >= 10


@pytest.mark.parametrize("target", TARGETS)
def test_the_ssh_gateway_service_publishes_the_port_web_shows(target: str):
    docs = _render(target)
    config = _config(docs)
    gateway = _named(docs, "Deployment", "ssh-gateway")
    service = _named(docs, "Service", "ssh-gateway")
    assert _selects(
        {"matchLabels": service["spec"]["selector"]},
        gateway["spec"]["template"]["metadata"]["labels"],
    )
    assert not [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d is not gateway
        and _selects(
            {"matchLabels": service["spec"]["selector"]},
            d["spec"]["template"]["metadata"]["labels"],
        )
    ], "the gateway's Service selects other pods"
    expected = "LoadBalancer" if target in SSH_LOADBALANCED else "ClusterIP"
    assert service["spec"]["type"] == expected
    [port] = service["spec"]["ports"]
    # Web shows `ssh -p SSH_GATEWAY_PORT`: the published port must be that one.
    assert port["port"] == int(config["SSH_GATEWAY_PORT"])
    assert port["protocol"] == "TCP"
    target_port = _port_number(_container(docs, "ssh-gateway"), port["targetPort"])
    assert target_port == 2222
    # SSH cannot go through an HTTP Ingress.
    for ingress in (d for d in docs if d["kind"] == "Ingress"):
        backends = json.dumps(ingress["spec"])
        assert service["metadata"]["name"] not in backends


@pytest.mark.parametrize("target", TARGETS)
def test_the_ssh_gateway_takes_2222_in_reaches_only_datastores_and_dns(target: str):
    docs = _render(target)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    container = _container(docs, "ssh-gateway")
    labels = _named(docs, "Deployment", "ssh-gateway")["spec"]["template"]["metadata"]["labels"]
    rules = [
        rule
        for p in policies
        if "Ingress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], labels)
        for rule in p["spec"].get("ingress", [])
    ]
    assert rules, "nothing may reach the SSH gateway"
    for rule in rules:
        # From anywhere (users' ssh clients; the gateway authenticates), to its port only.
        assert not rule.get("from"), rule
        assert rule.get("ports"), f"a rule admits every port: {rule}"
        for port in rule["ports"]:
            assert port.get("protocol", "TCP") == "TCP" and "endPort" not in port, rule
            assert _port_number(container, port["port"]) == 2222, rule
    # Its port is open on no other pod.
    for name, other, _ in _pod_templates(docs):
        if other == labels:
            continue
        for p in policies:
            if "Ingress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], other):
                ports = [
                    port["port"]
                    for r in p["spec"].get("ingress", [])
                    for port in r.get("ports", [])
                ]
                assert "ssh" not in ports and 2222 not in ports, f"{name}: {p['metadata']['name']}"
    egress = [
        rule
        for p in policies
        if "Egress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], labels)
        for rule in p["spec"].get("egress", [])
    ]
    # It never connects to jobs' pods or nodes: no SSH, no HTTPS, no rule without ports.
    assert all(rule.get("ports") for rule in egress), "an egress rule allows every port"
    allowed = {port["port"] for rule in egress for port in rule["ports"]}
    assert allowed == {53, 5432, 6379}


@pytest.mark.parametrize("target", TARGETS)
def test_web_and_the_ssh_gateway_agree_on_its_settings(target: str):
    docs = _render(target)
    web = _environment(docs, _container(docs, "web"))
    gateway = _environment(docs, _container(docs, "ssh-gateway"))
    for setting in SSH_SHARED_SETTINGS:
        assert setting in gateway, f"the gateway has no {setting}"
        assert web.get(setting) == gateway[setting], setting
    assert int(gateway["SSH_GATEWAY_PORT"]) > 0, "SSH_GATEWAY_PORT=0 turns the gateway off"
    # Empty means the web page's host: the Ingress's address, not the gateway's.
    assert gateway["SSH_GATEWAY_HOST"], "SSH_GATEWAY_HOST is empty"
    assert gateway["SSH_GATEWAY_HOST"] not in _config(docs)["ALLOWED_HOSTS"].split(",")


def _documented(prefix: str) -> list[str]:
    """The one command line of docs/deploy-kubernetes.md that starts with `prefix`."""
    lines = [line.strip() for line in DOCS.read_text().splitlines()]
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"expected one `{prefix}...` line in {DOCS.name}, found {found}"
    return shlex.split(found[0].split(" #")[0])


def test_the_documented_host_key_secret_is_one_the_gateway_loads(tmp_path: Path):
    keygen = _documented("ssh-keygen -t ")
    create = _documented(f"kubectl -n trainyard create secret generic {SSH_HOST_KEY_SECRET} ")
    if shutil.which("ssh-keygen") is None:
        pytest.fail("ssh-keygen is not on PATH (Debian: openssh-client)", pytrace=False)
    subprocess.run(keygen, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    secret = yaml.safe_load(
        subprocess.run(
            [_kubectl(), *create[1:], "--dry-run=client", "-o", "yaml"],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert secret["metadata"]["name"] == SSH_HOST_KEY_SECRET
    assert set(secret["data"]) == {SSH_HOST_KEY_ITEM}
    secret["metadata"].pop("creationTimestamp", None)
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(secret, version, strict=True)
    # The file the pod sees, read by the gateway's own loader: the key ssh-keygen made.
    mounted = tmp_path / "mounted" / SSH_HOST_KEY_ITEM
    mounted.parent.mkdir()
    mounted.write_bytes(base64.b64decode(secret["data"][SSH_HOST_KEY_ITEM]))
    key = load_or_create(mounted)
    public = (tmp_path / f"{keygen[keygen.index('-f') + 1]}.pub").read_text().split()
    assert key.public.split()[:2] == public[:2]
    assert key.public.startswith("ssh-ed25519 ")
