"""Jobs and what they leave behind: attempts, events, log lines, metrics and artifacts.

Money is integer micro-dollars (1,000,000 = $1). Public ids (`job_…`) name jobs outside;
auto-increment ids order events and log lines and serve as their cursors.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import F, Func, Prefetch, Q, Value
from django.db.models.functions import Coalesce
from django.db.models.lookups import GreaterThan, LessThan
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.ids import new_public_id
from apps.jobs.states import TERMINAL_STATES, JobState
from apps.projects.models import Project


def new_job_id() -> str:
    return new_public_id("job")


def new_token_nonce() -> str:
    return secrets.token_hex(16)


class JobQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> JobQuerySet:
        return self.filter(organization=organization)

    def active(self) -> JobQuerySet:
        return self.exclude(state__in=TERMINAL_STATES)

    def with_attempts(self) -> JobQuerySet:
        """Each job's attempts in order, with their provider and who preempted them: what
        every page and API answer that shows attempts reads."""
        return self.prefetch_related(
            Prefetch(
                "attempts",
                queryset=Attempt.objects.select_related("provider", "preempted_by").order_by(
                    "number"
                ),
            )
        )

    def with_reruns(self) -> JobQuerySet:
        """What the job object says of re-runs, without a query per job: the id of the job
        each re-runs (`rerun_of_public_id`) and its own re-runs' ids, oldest first."""
        return self.annotate(rerun_of_public_id=F("rerun_of__public_id")).prefetch_related(
            Prefetch(
                "reruns",
                queryset=Job.objects.only("id", "public_id", "rerun_of_id", "created_at").order_by(
                    "created_at", "id"
                ),
            )
        )


class Job(models.Model):
    class Kind(models.TextChoices):
        CONTAINER = "container"
        FINETUNE = "finetune"
        SERVE = "serve"  # an endpoint's or the Playground's inference server

    class PriorityClass(models.TextChoices):
        STANDARD = "standard"
        PREEMPTIBLE = "preemptible"

    public_id = models.CharField(max_length=32, unique=True, default=new_job_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="jobs")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CONTAINER)
    priority_class = models.CharField(
        max_length=16, choices=PriorityClass.choices, default=PriorityClass.STANDARD
    )

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.REQUESTED)
    reason = models.CharField(max_length=64, null=True, blank=True)
    error_message = models.TextField(blank=True)

    # The submitted request, normalised, with secret references only (never values).
    spec = models.JSONField()
    accelerator = models.CharField(max_length=64)
    gpu_count = models.PositiveSmallIntegerField()
    ephemeral_disk_gb = models.PositiveIntegerField()
    max_runtime_hours = models.FloatField(null=True, blank=True)
    max_cost_micros = models.BigIntegerField(null=True, blank=True)
    max_price_micros_hr = models.BigIntegerField(null=True, blank=True)

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    # The job file it was submitted from (`trainyard apply -f job.yaml`), as written, comments
    # and all: shown on the job's page. Not the spec (that is `spec`); blank for other jobs.
    job_file_name = models.CharField(max_length=255, blank=True, default="")
    job_file = models.TextField(blank=True, default="")
    # The job this one runs again (`POST …/jobs/{id}/rerun`, the page's "Run again" and
    # "Edit and run"); the original lists its re-runs as `reruns`.
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )

    accrued_micros = models.BigIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    # Times the job lost its hardware to a higher-priority job or a reclaim; past
    # PREEMPTION_MAX_PER_JOB it fails `too_many_preemptions` (apps.jobs.execution.preemption).
    preemption_count = models.PositiveIntegerField(default=0)
    # Deliveries of dispatch work since the job last moved on; too many means a task keeps
    # crashing on this job, which then fails (`dispatch_crash`) instead of looping.
    dispatch_deliveries = models.PositiveSmallIntegerField(default=0)
    # Bumped in the same transaction as every write that is pushed live (events, state, logs,
    # metrics); pushes carry it, so a page can tell a gap or a duplicate (docs/realtime.md).
    live_seq = models.BigIntegerField(default=0)
    user_log_lines = models.BigIntegerField(default=0)
    system_log_lines = models.BigIntegerField(default=0)
    # The ended job's whole log as one gzip file in the default storage, built once after it
    # ends (apps.jobs.telemetry.log_archive): the file's storage name, the highest LogLine id
    # and the number of lines it holds. Written only after the file is complete; a reader
    # trusts it only while both still match the job's log ("" and None: no archive yet).
    log_archive_name = models.CharField(max_length=255, blank=True, default="")
    log_archive_last_id = models.BigIntegerField(null=True, blank=True)
    log_archive_lines = models.BigIntegerField(default=0)
    # Each metric series' latest point and point count, kept by ingestion (and a resume) in
    # the same transaction as the MetricSample rows, so the job object's `latest_metrics` and
    # the metrics API's `names` cost no query: {name: {step, value, time, attempt, points}}.
    metric_series = models.JSONField(default=dict, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    # When the job last entered `requested`: the no-capacity wait counts from here.
    queued_at = models.DateTimeField(default=timezone.now)
    allocated_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    terminal_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_idempotency_key_per_org",
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "-created_at", "-id"], name="job_org_recent"),
            models.Index(
                fields=["organization", "project", "-created_at", "-id"], name="job_project_recent"
            ),
            models.Index(
                fields=["organization", "state", "-created_at", "-id"], name="job_state_recent"
            ),
            # The overview's failures of the last day, and the all-jobs list's filters.
            models.Index(fields=["organization", "state", "-terminal_at"], name="job_state_ended"),
            models.Index(
                fields=["organization", "kind", "-created_at", "-id"], name="job_kind_recent"
            ),
            models.Index(
                fields=["organization", "created_by", "-created_at", "-id"],
                name="job_creator_recent",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class JobCounter(models.Model):
    """How many jobs an (organization, project, state) holds, kept by the services in the
    same transaction as each write, so a filtered job list can report its `total` without
    counting rows (COUNT grows with the table; this does not)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=16, choices=JobState.choices)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "project", "state"], name="one_counter_per_bucket"
            )
        ]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.state}: {self.count}"


class Attempt(models.Model):
    """One run of the workload on one allocation. Preemption starts a new attempt; at most
    one attempt of a job is live (not ended) at a time."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    provider = models.ForeignKey(
        "providers.Provider", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    offer = models.ForeignKey(
        "catalog.Offer", null=True, blank=True, on_delete=models.PROTECT, related_name="attempts"
    )
    accelerator = models.CharField(max_length=64)
    gpu_count = models.PositiveSmallIntegerField()
    # The host's GPU indices this attempt holds while live, as placement gave them
    # (apps.jobs.execution.placement); [] for a CPU attempt and where the provider assigns
    # GPUs itself (Slurm).
    gpu_devices = models.JSONField(default=list, blank=True)
    gpu_memory_gb = models.PositiveIntegerField(default=0)
    # The whole allocation's price per hour, captured at allocation.
    price_micros_hr = models.BigIntegerField(default=0)
    # The backend's handle for this attempt (pid, pod name, slurm id...); {} until launched.
    handle = models.JSONField(default=dict, blank=True)
    # The runner token is derived from this nonce and SECRET_KEY (apps.jobs.execution.tokens), so it
    # can be handed out again on a relaunch without storing it.
    token_nonce = models.CharField(max_length=32, unique=True, default=new_token_nonce)
    # The secret values this attempt's runner was told to mask, as one Fernet token
    # (SECRETS_KEYS; never plaintext), written when the spec is served. Ingestion keeps
    # masking them after a secret is deleted or changed (apps.jobs.telemetry.masking).
    mask_values_encrypted = models.TextField(null=True, blank=True, editable=False)
    launched_at = models.DateTimeField(null=True, blank=True)
    terminate_requested_at = models.DateTimeField(null=True, blank=True)
    # Set when placement displaces this attempt for a standard job (`preempted_by`): the
    # runner is told `checkpoint_and_exit`; the capacity it frees is held for that job.
    preempt_requested_at = models.DateTimeField(null=True, blank=True)
    # When a session into this attempt (SSH gateway, terminal) was last asked for: the
    # runner's answers carry the shell hint for a while after it (runner.protocol).
    shell_wanted_at = models.DateTimeField(null=True, blank=True)
    preempted_by = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="displaced_attempts"
    )
    # Set when the hardware was taken back (an operator's reclaim, a lapsed heartbeat): the
    # attempt's end, whatever its exit code, is a reclaim, not a failure.
    reclaim_reason = models.CharField(max_length=64, blank=True)
    allocated_at = models.DateTimeField(default=timezone.now)
    # When the provider gave the attempt its hardware: billing counts from here. At placement
    # for a backend that allocates at launch (a host slot); for a batch queue (Slurm) when the
    # attempt first runs. Null while it waits in the provider's queue.
    billing_started_at = models.DateTimeField(null=True, blank=True)
    # The provider's reason while the attempt waits in its queue (Slurm's `Resources`, say);
    # blank once it runs.
    queue_reason = models.CharField(max_length=200, blank=True)
    # The port a serving workload listens on, as it announced it (a `serving` line); the
    # backend's `endpoint_url(handle, port)` says how the control plane reaches it.
    service_port = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    end_reason = models.CharField(max_length=64, blank=True)
    billed_minutes = models.PositiveIntegerField(default=0)
    # Set when a limit or budget ends the job: billing stops here, not when the hardware
    # is finally released (the teardown is not the customer's to pay).
    billed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_number_per_job"),
            models.UniqueConstraint(
                fields=["job"], condition=Q(ended_at__isnull=True), name="one_live_attempt_per_job"
            ),
        ]
        indexes = [
            # Placement counts an offer's live attempts and the capacity held by displaced
            # ones; both stay small while the attempts an offer ever ran keep growing.
            models.Index(
                fields=["offer"], condition=Q(ended_at__isnull=True), name="attempt_live_offer"
            ),
            models.Index(
                fields=["offer"],
                condition=Q(preempted_by__isnull=False),
                name="attempt_displaced_offer",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.number}"

    @property
    def cost_micros(self) -> int:
        """What this attempt was billed: its own whole minutes at its own price."""
        return self.billed_minutes * self.price_micros_hr // 60


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    type = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "id"], name="event_job_id")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.type}"


# Where a line sits in its attempt's log: a runner line at its seq, a control-plane line
# right after the runner line with the highest seq stored when it was written (`after_seq`).
# Logs read back in (attempt, LOG_POSITION, id) order, never in id order alone: a runner
# batch held up longer than ingestion's FOLLOW_WAIT_S (an outage of the control plane) is
# stored after its successor, with higher ids, and must still read before it.
LOG_POSITION = Coalesce(F("seq"), F("after_seq"), Value(0))
LOG_ORDER = ("attempt", "log_position", "id")


class _Row(Func):
    """A SQL row value, `(a, b, c)`, compared element by element (PostgreSQL and SQLite)."""

    template = "(%(expressions)s)"
    output_field = models.BigIntegerField()


class LogLineQuerySet(models.QuerySet):
    def in_log_order(self, *, descending: bool = False) -> LogLineQuerySet:
        """The lines in the order a log is read: (attempt, position, id); the log_job_order
        index serves it."""
        keys = [f"-{key}" if descending else key for key in LOG_ORDER]
        return self.annotate(log_position=LOG_POSITION).order_by(*keys)

    def beyond(self, line: LogLine | None, *, descending: bool = False) -> LogLineQuerySet:
        """The lines after `line` in log order (before it when `descending`); all of them
        when `line` is None. Call on `in_log_order()`."""
        if line is None:
            return self
        key = _Row(F("attempt"), LOG_POSITION, F("id"))
        mark = _Row(Value(line.attempt), Value(line.log_position), Value(line.id))
        return self.filter(LessThan(key, mark) if descending else GreaterThan(key, mark))

    def place(self, lines: list[LogLine]) -> list[LogLine]:
        """Set `after_seq` on control-plane lines (no seq) about to be stored: after the
        highest seq their attempt has stored now. One query per (job, attempt)."""
        highest: dict[tuple[int, int], int] = {}
        for line in lines:
            if line.seq is not None:
                continue
            key = (line.job_id, line.attempt)
            if key not in highest:
                stored = self.filter(job_id=key[0], attempt=key[1], seq__isnull=False)
                highest[key] = stored.aggregate(top=models.Max("seq"))["top"] or 0
            line.after_seq = highest[key]
        return lines

    def position_of(self, line_id: int) -> LogLine | None:
        """The line `line_id` with its `log_position`, or None when it is not in this set
        (a cursor naming another job's line, or a line gone with its job)."""
        return self.annotate(log_position=LOG_POSITION).filter(id=line_id).first()


class LogLine(models.Model):
    class Source(models.TextChoices):
        USER = "user"
        SYSTEM = "system"

    class Stream(models.TextChoices):
        STDOUT = "stdout"
        STDERR = "stderr"

    # No foreign-key constraint and no index of its own in the database: the constraint's
    # per-row check cost as much as the rest of a batch's COPY (1.5 → 0.65 s per 100,000
    # lines), and `log_job_id` serves every lookup by job. Deleting a job still deletes its
    # lines (Django cascades; a job with money in the ledger cannot be deleted at all), and
    # ingestion, the one writer of the workload's lines, stores a batch only while the job's
    # row is there (its counters' UPDATE finds it, in the same transaction).
    job = models.ForeignKey(
        Job,
        on_delete=models.CASCADE,
        related_name="log_lines",
        db_constraint=False,
        db_index=False,
    )
    attempt = models.PositiveIntegerField(default=1)
    # The runner's per-attempt sequence number; NULL for lines the control plane writes.
    seq = models.PositiveIntegerField(null=True, blank=True)
    # A control-plane line's place in its attempt: the highest seq stored when it was
    # written (0 before any). NULL for runner lines (their seq is their place).
    after_seq = models.PositiveIntegerField(null=True, blank=True)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.USER)
    stream = models.CharField(max_length=8, choices=Stream.choices, default=Stream.STDOUT)
    timestamp = models.DateTimeField()
    message = models.TextField()

    objects = LogLineQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job", "id"], name="log_job_id"),
            # Reading a log in order (pages, the job page's window, downloads).
            models.Index(F("job"), F("attempt"), LOG_POSITION, F("id"), name="log_job_order"),
            # System lines are a few per attempt: only they need an index of their own (a
            # page of user lines walks log_job_id, skipping them). One index fewer to keep
            # up on every batch of the workload's lines.
            models.Index(
                fields=["job", "id"],
                name="log_job_system_id",
                condition=Q(source="system"),
            ),
        ]
        constraints = [
            # A retried batch is stored once: ingestion skips (attempt, seq) pairs it has.
            models.UniqueConstraint(
                fields=["job", "attempt", "seq"],
                condition=Q(seq__isnull=False),
                name="log_line_once_per_seq",
            )
        ]

    def __str__(self) -> str:
        return self.message[:80]


class MetricPoint(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    attempt = models.PositiveIntegerField(default=1)
    step = models.PositiveIntegerField()
    loss = models.FloatField(null=True, blank=True)
    epoch = models.FloatField(null=True, blank=True)
    learning_rate = models.FloatField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)
    # A later attempt resumed from a checkpoint before this step (or restarted from the
    # beginning): the step was trained again, and the final curve shows the newer point.
    superseded = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "step"], name="metric_job_step")]

    def __str__(self) -> str:
        return f"{self.job_id} step {self.step}"


class MetricSample(models.Model):
    """One value of one named series (`loss`, `val_loss`, `eval_accuracy`, ...) at one step:
    the metrics API's point. MetricPoint keeps a metric line as printed, for the job page;
    this narrow form is what lets a job with 100k steps be read a series at a time, by
    (step, id) keyset, from an index.

    `superseded`: a later report of the same series at the same step (a resumed attempt
    re-reporting the step it resumed at, or a workload printing a step twice), or a resume
    that trains the step again. Only points that are not superseded are shown."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_samples")
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    # NaN and infinity are kept where the database can (PostgreSQL); the API shows them
    # as null, JSON having no such numbers.
    value = models.FloatField(null=True)
    superseded = models.BooleanField(default=False)
    # When the workload printed it: the log line's timestamp.
    time = models.DateTimeField()

    class Meta:
        ordering = ["step", "id"]
        indexes = [
            models.Index(
                fields=["job", "name", "step", "id"],
                condition=Q(superseded=False),
                name="metric_sample_series",
            ),
            models.Index(
                fields=["job", "step", "id"],
                condition=Q(superseded=False),
                name="metric_sample_steps",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name}@{self.step}"


class Artifact(models.Model):
    class Kind(models.TextChoices):
        CHECKPOINT = "checkpoint"
        ADAPTER = "adapter"
        MERGED = "merged"  # the base model with the final adapter merged in (on request)

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="artifacts")
    attempt = models.PositiveIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    step = models.PositiveIntegerField(null=True, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    storage_path = models.CharField(max_length=500)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "kind", "-step"], name="artifact_job_kind_step")]
        constraints = [
            # A retried upload is stored once (apps.jobs.artifacts.artifact_store). Two
            # partial constraints rather than one with NULLS NOT DISTINCT, which SQLite (the
            # embedded default) lacks: the final adapter has no step.
            models.UniqueConstraint(
                fields=["job", "attempt", "kind", "step"],
                condition=Q(step__isnull=False),
                name="artifact_once_per_step",
            ),
            models.UniqueConstraint(
                fields=["job", "attempt", "kind"],
                condition=Q(step__isnull=True),
                name="artifact_once_without_step",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.storage_path}"
