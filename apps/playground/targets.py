"""What a Playground pane can talk to, and how an id from a URL or a request names it.

A target is one of:
- `base`: a base model itself (served as `base` on its Playground server);
- `art_<n>`: a final adapter or a checkpoint of any of the organization's jobs that says
  which base model it trained on (a fine-tune), served on that base's Playground server;
- `hub:<org>/<name>[@revision]`: the adapter in a model repository of the organization's
  hub (its `adapter_config.json` names the base model), served the same way;
- `ep_…`: one of the organization's endpoints, answered by the endpoint's own engine with
  its current revision.

Every lookup is scoped to the organization: another organization's id is simply not found
(None), and nothing about it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.finetunes import payloads as finetune_payloads
from apps.hub import repos as hub_repos
from apps.hub.errors import RepoNotFound, RevisionNotFound
from apps.hub.models import HubCommit, HubRef, RefKind, RepoKind
from apps.hub.names import DEFAULT_BRANCH
from apps.jobs.artifacts.store import artifact_pk, public_artifact_id
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from apps.projects.models import Project
from apps.serving import adapters
from apps.serving import selectors as serving_selectors
from apps.serving.models import Endpoint
from apps.serving.services import base_model_of_artifact
from runner.protocol import hub_reference

BASE = "base"
RECENT_FINETUNES = 50


@dataclass(frozen=True)
class Target:
    value: str  # "base", "art_<n>", "hub:<org>/<name>@<rev>" or "ep_…": what a pane sends
    label: str
    base_model: str | None  # None for an endpoint (its engine is its own)
    artifact: Artifact | None = None
    endpoint: Endpoint | None = None
    hub_commit: HubCommit | None = None

    @property
    def kind(self) -> str:
        if self.artifact is not None:
            return "artifact"
        if self.hub_commit is not None:
            return "hub"
        return "endpoint" if self.endpoint is not None else BASE

    @property
    def key(self) -> str:
        """Unique among a page's choices (every base model's target says `base`)."""
        return f"base:{self.base_model}" if self.kind == BASE else self.value


@dataclass
class Group:
    label: str
    targets: list[Target] = field(default_factory=list)


def base_target(base_model: str) -> Target:
    return Target(value=BASE, label=f"Base model · {base_model}", base_model=base_model)


def _artifact_label(artifact: Artifact) -> str:
    if artifact.kind == Artifact.Kind.ADAPTER:
        label = "final adapter"
    else:
        label = f"checkpoint · step {artifact.step}" if artifact.step is not None else "checkpoint"
    return label if artifact.attempt == 1 else f"{label} (attempt {artifact.attempt})"


def artifact_as_target(artifact: Artifact) -> Target | None:
    """The target of an artifact whose job says its base model; None otherwise. Its label
    names the job: a closed picker shows the option alone, without its group."""
    base_model = base_model_of_artifact(artifact)
    if not base_model or artifact.kind == Artifact.Kind.MERGED:  # merged: not an adapter
        return None
    label = f"{artifact.job.name} · {_artifact_label(artifact)}"
    return Target(
        value=public_artifact_id(artifact), label=label, base_model=base_model, artifact=artifact
    )


HUB_PREFIX = "hub:"
HUB_ADAPTERS_LISTED = 20


def hub_target(organization: Organization, value: str) -> Target | None:
    """`hub:<org>/<name>[@revision]`: the adapter in that model repository of the
    organization's hub, at the commit the revision names now (`main` when none); None when
    it is not one of the organization's, or holds no adapter that names its base model."""
    reference = value.removeprefix(HUB_PREFIX).strip()
    repo_id, revision = hub_reference(reference)
    namespace, _, name = repo_id.partition("/")
    if namespace != organization.slug or not name:
        return None
    try:
        repo = hub_repos.find_repo(organization, RepoKind.MODEL, name)
        commit = hub_repos.resolve(repo, revision or DEFAULT_BRANCH)
    except (RepoNotFound, RevisionNotFound):
        return None
    config = adapters.adapter_config(commit) or {}
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        return None
    named = f"{repo_id}@{revision or DEFAULT_BRANCH}"
    return Target(
        value=f"{HUB_PREFIX}{named}",
        label=f"Hub · {named}",
        base_model=base.strip(),
        hub_commit=commit,
    )


def hub_adapter_targets(organization: Organization) -> list[Target]:
    """The organization's model repositories whose `main` holds an adapter, most recently
    changed first (a few: each is read to learn its base model)."""
    names = (
        HubRef.objects.filter(
            repo__organization=organization,
            repo__kind=RepoKind.MODEL,
            kind=RefKind.BRANCH,
            name=DEFAULT_BRANCH,
            commit__files__path=adapters.ADAPTER_CONFIG,
        )
        .order_by("-repo__updated_at")
        .values_list("repo__name", flat=True)[:HUB_ADAPTERS_LISTED]
    )
    found = [hub_target(organization, f"{organization.slug}/{name}") for name in names]
    return [target for target in found if target is not None]


def endpoint_as_target(endpoint: Endpoint) -> Target:
    return Target(
        value=endpoint.public_id,
        label=f"Endpoint · {endpoint.name}",
        base_model=None,
        endpoint=endpoint,
    )


def org_artifact(organization: Organization, value: str) -> Artifact | None:
    """The artifact `art_<n>` of one of the organization's jobs; None when it is not one."""
    try:
        pk = artifact_pk(value)
    except InvalidRequest:
        return None
    return (
        Artifact.objects.select_related("job").filter(job__organization=organization, pk=pk).first()
    )


def artifact_target(organization: Organization, value: str) -> Target | None:
    """`art_<n>` of one of the organization's jobs, as a target; None when it is not one
    (or its job does not say its base model)."""
    artifact = org_artifact(organization, value)
    return artifact_as_target(artifact) if artifact is not None else None


def job_target(organization: Organization, value: str) -> Target | None:
    """The final adapter of the organization's job `job_…` (of its newest attempt that
    uploaded one); None when there is no such job or it has no adapter."""
    job = Job.objects.for_org(organization).filter(public_id=value).first()
    if job is None:
        return None
    artifact = (
        Artifact.objects.select_related("job")
        .filter(job=job, kind=Artifact.Kind.ADAPTER)
        .order_by("-attempt", "-id")
        .first()
    )
    return artifact_as_target(artifact) if artifact is not None else None


def endpoint_target(organization: Organization, value: str) -> Target | None:
    endpoint = serving_selectors.endpoint_for_org(organization, value)
    if endpoint is None or endpoint.state == Endpoint.State.STOPPED:
        return None
    return endpoint_as_target(endpoint)


def _finetunes(organization: Organization, project: Project):
    return (
        Job.objects.for_org(organization)
        .filter(project=project, kind=Job.Kind.FINETUNE, state=JobState.SUCCEEDED)
        .order_by("-created_at", "-id")[:RECENT_FINETUNES]
    )


def project_base_models(organization: Organization, project: Project) -> list[str]:
    """The base models of the project's recent completed fine-tunes, newest first: the
    base models a pane may pick by themselves."""
    seen: list[str] = []
    for job in _finetunes(organization, project):
        model = (finetune_payloads.config_of(job) or {}).get("model")
        if isinstance(model, str) and model.strip() and model.strip() not in seen:
            seen.append(model.strip())
    return seen


def choices(organization: Organization, project: Project, extra: list[Target]) -> list[Group]:
    """What a pane's picker lists: the base models, each recent completed fine-tune of the
    project with its final adapter and checkpoints, and the organization's endpoints that
    are not stopped. `extra` (targets named in the URL) are listed too, where they are not
    already."""
    finetunes = list(_finetunes(organization, project).prefetch_related("artifacts"))
    job_groups: list[Group] = []
    for job in finetunes:
        artifacts = sorted(
            job.artifacts.all(),
            key=lambda a: (a.kind != Artifact.Kind.ADAPTER, -a.attempt, -(a.step or 0), -a.pk),
        )
        targets = []
        for artifact in artifacts:
            artifact.job = job
            target = artifact_as_target(artifact)
            if target is not None:
                targets.append(target)
        if targets:
            job_groups.append(Group(label=f"{job.name} ({job.public_id})", targets=targets))
    listed = {target.key for group in job_groups for target in group.targets}
    others = [target for target in extra if target.kind == "artifact" and target.key not in listed]
    if others:
        job_groups.insert(0, Group(label="Opened from a link", targets=others))

    bases: list[str] = []
    for target in [*extra, *(t for g in job_groups for t in g.targets)]:
        if target.base_model and target.base_model not in bases:
            bases.append(target.base_model)
    hub = hub_adapter_targets(organization)
    hub_keys = {target.key for target in hub}
    hub += [t for t in extra if t.kind == "hub" and t.key not in hub_keys]
    for target in hub:
        if target.base_model and target.base_model not in bases:
            bases.append(target.base_model)
    groups = [Group(label="Base models", targets=[base_target(model) for model in bases])]
    groups += job_groups
    if hub:
        groups.append(Group(label="Hub adapters", targets=hub))
    endpoints = [
        endpoint_as_target(endpoint)
        for endpoint in serving_selectors.endpoints_for_org(organization)
        .exclude(state=Endpoint.State.STOPPED)
        .order_by("name")
    ]
    if endpoints:
        groups.append(Group(label="Endpoints", targets=endpoints))
    return [group for group in groups if group.targets]
