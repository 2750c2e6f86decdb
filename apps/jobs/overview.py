"""Reads behind the organization's overview and its all-jobs list (docs/dashboard.md).

Both stay flat as an organization's jobs grow: every list is a LIMIT over an index that
starts with the organization (`job_org_recent`, `job_state_recent`, `job_state_ended`,
`job_kind_recent`, `job_creator_recent`), and counts come from `JobCounter` (one row per
project and state), never from COUNT over jobs — except the failures of the last day and a
free-text search, which count at most `COUNT_CAP` rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q, Sum
from django.http import Http404
from django.utils import timezone

from apps.accounts.models import Membership, Organization
from apps.billing import selectors as billing_selectors
from apps.billing.budgets import period_start
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, created_page
from apps.jobs.events import JobEventType
from apps.jobs.models import Job, JobCounter, JobEvent
from apps.jobs.states import HOLDS_HARDWARE, NOTHING_TO_RELEASE, JobState
from apps.projects.models import Project

OVERVIEW_ROWS = 20
FAILURE_ROWS = 10
FAILURE_WINDOW = timedelta(hours=24)
COUNT_CAP = 1000
RUNNING_STATES = tuple(sorted(HOLDS_HARDWARE))
QUEUED_STATES = tuple(sorted(NOTHING_TO_RELEASE))


@dataclass
class Section:
    """A capped list of jobs and how many there are in all."""

    jobs: list[Job]
    total: int

    @property
    def more(self) -> int:
        return max(0, self.total - len(self.jobs))


@dataclass
class Overview:
    running: Section
    queued: Section
    failures: Section
    spend_today_micros: int
    spend_month_micros: int
    burn_micros_hr: int
    over_budget: list[str] = field(default_factory=list)
    has_projects: bool = True
    has_jobs: bool = True


def _state_counts(organization: Organization) -> dict[str, int]:
    rows = (
        JobCounter.objects.filter(organization=organization)
        .values("state")
        .annotate(total=Sum("count"))
    )
    return {row["state"]: row["total"] or 0 for row in rows}


def _newest(organization: Organization, states) -> list[Job]:
    """The newest jobs in `states`, each with its `current_attempt` (None before one)."""
    jobs = list(
        Job.objects.for_org(organization)
        .filter(state__in=states)
        .select_related("project")
        .with_attempts()
        .order_by("-created_at", "-id")[:OVERVIEW_ROWS]
    )
    for job in jobs:
        attempts = list(job.attempts.all())
        job.current_attempt = attempts[-1] if attempts else None
    return jobs


def waiting_reasons(jobs: list[Job], *, over_budget: bool) -> dict[int, str]:
    """Why each waiting job waits, in words, with one query for the lot."""
    last_told: dict[int, object] = {}
    for job_id, at in JobEvent.objects.filter(
        job__in=[job for job in jobs if job.state == JobState.REQUESTED],
        type=JobEventType.WAITING_FOR_CAPACITY,
    ).values_list("job_id", "created_at"):
        last_told[job_id] = max(at, last_told.get(job_id, at))
    reasons = {}
    for job in jobs:
        told = last_told.get(job.pk)
        if over_budget:
            reasons[job.pk] = "Over budget: it waits until the budget allows more spend."
        elif job.state == JobState.PREEMPTED:
            reasons[job.pk] = "Waiting to resume from its last checkpoint."
        elif told is not None and told >= job.queued_at:
            wants = f"{job.accelerator} x{job.gpu_count}"
            reasons[job.pk] = f"No capacity: no provider has {wants} free."
        else:
            reasons[job.pk] = "Being placed on a provider."
    return reasons


def overview(organization: Organization) -> Overview:
    """What runs, what waits (and why), what failed in the last day, and what it cost."""
    counts = _state_counts(organization)
    now = timezone.now()
    running = Section(
        _newest(organization, RUNNING_STATES), sum(counts.get(s, 0) for s in RUNNING_STATES)
    )
    queued = Section(
        _newest(organization, QUEUED_STATES), sum(counts.get(s, 0) for s in QUEUED_STATES)
    )
    failed_recently = Job.objects.for_org(organization).filter(
        state=JobState.FAILED, terminal_at__gte=now - FAILURE_WINDOW
    )
    failures = Section(
        list(
            failed_recently.select_related("project").order_by("-terminal_at", "-id")[:FAILURE_ROWS]
        ),
        failed_recently.order_by()[:COUNT_CAP].count(),
    )
    exhausted = [
        status.budget
        for status in billing_selectors.budget_status(organization.pk, now)
        if status.spent_micros >= status.budget.limit_micros
    ]
    over_budget = [
        f"{budget.project.name if budget.project else 'Organization'} {budget.period} budget"
        for budget in exhausted
    ]
    reasons = waiting_reasons(queued.jobs, over_budget=bool(exhausted))
    for job in queued.jobs:
        job.waiting_reason = reasons[job.pk]
    return Overview(
        running=running,
        queued=queued,
        failures=failures,
        spend_today_micros=billing_selectors.spend_since(organization.pk, period_start("day", now)),
        spend_month_micros=billing_selectors.spend_since(
            organization.pk, period_start("month", now)
        ),
        burn_micros_hr=billing_selectors.account_summary(organization.pk).burn_micros_hr,
        over_budget=over_budget,
        has_projects=Project.objects.for_org(organization).exists(),
        has_jobs=bool(sum(counts.values())),
    )


# -- the all-jobs list -------------------------------------------------------------------


@dataclass(frozen=True)
class JobFilters:
    """The all-jobs list's filters, as the URL's query string holds them."""

    project: str = ""
    state: str = ""
    kind: str = ""
    creator: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, params) -> JobFilters:
        """Read the filters; an unknown state or kind is ignored, never a 500."""
        state = params.get("state", "")
        kind = params.get("kind", "")
        return cls(
            project=params.get("project", "").strip()[:64],
            state=state if state in JobState.values else "",
            kind=kind if kind in Job.Kind.values else "",
            creator=params.get("creator", "").strip()[:150],
            q=params.get("q", "").strip()[:200],
        )

    def as_query(self) -> dict[str, str]:
        return {key: value for key, value in vars(self).items() if value}

    def matches(self, row: dict) -> bool:
        """Whether a pushed job (`apps.jobs.live.partials.push_facts`) belongs in a list
        with these filters."""
        if self.project and row.get("project") != self.project:
            return False
        if self.state and row.get("state") != self.state:
            return False
        if self.kind and row.get("kind") != self.kind:
            return False
        if self.creator and row.get("creator") != self.creator:
            return False
        if self.q:
            needle = self.q.casefold()
            if needle not in (row.get("name") or "").casefold() and row.get("job") != self.q:
                return False
        return True


def org_jobs(
    organization: Organization, page: PageRequest, filters: JobFilters
) -> tuple[list[Job], str | None, int | None]:
    """One page of the organization's jobs, newest first, with the filters applied; the total
    from the counters when only project and state filter (None when a count would have to
    read rows)."""
    jobs = Job.objects.for_org(organization)
    counters = JobCounter.objects.filter(organization=organization)
    countable = True
    if filters.project:
        project = Project.objects.for_org(organization).filter(slug=filters.project).first()
        if project is None:
            raise Http404("No such project.")
        jobs = jobs.filter(project=project)
        counters = counters.filter(project=project)
    if filters.state:
        jobs = jobs.filter(state=filters.state)
        counters = counters.filter(state=filters.state)
    if filters.kind:
        jobs = jobs.filter(kind=filters.kind)
        countable = False
    if filters.creator:
        member = (
            Membership.objects.filter(organization=organization, user__username=filters.creator)
            .values_list("user_id", flat=True)
            .first()
        )
        if member is None:
            raise InvalidRequest("No such member.", param="creator")
        jobs = jobs.filter(created_by_id=member)
        countable = False
    if filters.q:
        jobs = jobs.filter(Q(name__icontains=filters.q) | Q(public_id=filters.q))
        countable = False
    jobs = jobs.select_related("project", "created_by").with_attempts()
    rows, next_cursor = created_page(jobs, page)
    total = (counters.aggregate(total=Sum("count"))["total"] or 0) if countable else None
    return rows, next_cursor, total
