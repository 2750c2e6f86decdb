"""A fine-tune's model and dataset named in the organization's own hub, checked at submit.

`<org>/<name>[@revision]` in the job's organization's namespace must be a model repository
(for `model`) or a dataset repository (for `dataset`) of that organization, and the revision
(a branch, a tag or a commit; `main` when none is given) must exist: a typo is a 400 naming
the field now, not a failed job minutes later. Hub ids in other namespaces are fetched from
huggingface.co by the workload and are not checked here.
"""

from __future__ import annotations

from apps.core.errors import InvalidRequest
from apps.hub import repos
from apps.hub.errors import RepoNotFound, RevisionNotFound
from apps.hub.models import RepoKind
from apps.hub.names import DEFAULT_BRANCH
from apps.projects.models import Project
from runner.protocol import hub_reference


def check_hub_reference(*, project: Project, value: str, kind: str, param: str) -> None:
    """Raise InvalidRequest (`param`) when `value` names the organization's hub and no such
    repository or revision is there."""
    organization = project.organization
    repo_id, revision = hub_reference(value.strip())
    namespace, _, name = repo_id.partition("/")
    if namespace != organization.slug or not name or "/" in name:
        return
    what = "model" if kind == RepoKind.MODEL else "dataset"
    try:
        repo = repos.find_repo(organization, kind, name)
    except RepoNotFound:
        raise InvalidRequest(
            f"There is no {what} repository {repo_id} in this organization's hub.", param=param
        ) from None
    try:
        repos.resolve(repo, revision or DEFAULT_BRANCH)
    except RevisionNotFound:
        raise InvalidRequest(
            f"{repo_id} has no branch, tag or commit {revision}.", param=param
        ) from None


def check_hub_references(*, project: Project, model: str, dataset: str) -> None:
    check_hub_reference(project=project, value=model, kind=RepoKind.MODEL, param="model")
    check_hub_reference(project=project, value=dataset, kind=RepoKind.DATASET, param="dataset")
