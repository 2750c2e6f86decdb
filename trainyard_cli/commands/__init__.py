"""The subcommands. Each is `run(ctx, args) -> exit code`, given a `Context` that holds the
API client; `trainyard_cli.main` builds the parser and picks one."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from trainyard_cli.client import Client, UsageError


@dataclass
class Context:
    client: Client
    _whoami: dict | None = field(default=None, repr=False)

    def whoami(self) -> dict:
        if self._whoami is None:
            self._whoami = self.client.get_json("/api/v1/whoami")
        return self._whoami

    def job_page(self, job_id: str) -> str:
        """The job's page in the dashboard (the URL pattern of apps/jobs/web/urls.py)."""
        slug = self.whoami()["organization"]["slug"]
        return f"{self.client.settings.url}/o/{slug}/jobs/{job_id}/"

    def project_id(self, value: str | None) -> str | None:
        """A project given by id (`proj_…`) or slug or name, as its id. Ids pass through
        untouched (the API says whether they exist); slugs are looked up in whoami."""
        if not value or value.startswith("proj_"):
            return value or None
        for project in self.whoami().get("projects", []):
            if value in (project.get("slug"), project.get("name")):
                return project["id"]
        raise UsageError(f"No project {value!r} in this organization (give its id or slug).")


def seg(value: str) -> str:
    """One URL path segment from user input (a job id cannot smuggle `/../`)."""
    return quote(value, safe="")
