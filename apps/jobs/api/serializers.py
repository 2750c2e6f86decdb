"""The API's view of a job, its attempts, events and log lines (the reference's shapes)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api import page_out
from apps.core.money import micros_to_usd
from apps.jobs import selectors
from apps.jobs.execution import placement
from apps.jobs.models import Artifact, Attempt, Job, JobEvent, LogLine, MetricSample
from apps.jobs.shell.hostkey import gateway_host_key
from apps.jobs.states import JobState


class AttemptOut(serializers.ModelSerializer):
    """One run of the workload. `preempted_by` names the job that displaced it (null when
    none, or when that job belongs to another organization); `billed_usd` is this attempt's
    own minutes at its own price."""

    provider = serializers.SerializerMethodField()
    price_usd_hr = serializers.SerializerMethodField()
    billed_usd = serializers.SerializerMethodField()
    preempted_by = serializers.SerializerMethodField()

    class Meta:
        model = Attempt
        fields = [
            "number",
            "provider",
            "accelerator",
            "gpu_count",
            "price_usd_hr",
            "allocated_at",
            "billing_started_at",
            "queue_reason",
            "started_at",
            "ended_at",
            "exit_code",
            "end_reason",
            "billed_minutes",
            "billed_usd",
            "preempted_by",
        ]

    def get_billed_usd(self, attempt: Attempt) -> float:
        return micros_to_usd(attempt.cost_micros)

    def get_preempted_by(self, attempt: Attempt) -> str | None:
        by = attempt.preempted_by
        if by is None or by.organization_id != attempt.job.organization_id:
            return None
        return by.public_id

    def get_provider(self, attempt: Attempt) -> str | None:
        return attempt.provider.name if attempt.provider else None

    def get_price_usd_hr(self, attempt: Attempt) -> float:
        return micros_to_usd(attempt.price_micros_hr)


class ComputeOut(serializers.Serializer):
    accelerator = serializers.CharField()
    gpu_count = serializers.IntegerField()
    ephemeral_disk_gb = serializers.IntegerField()


class HardwareOut(serializers.Serializer):
    accelerator = serializers.CharField()
    gpu_count = serializers.IntegerField()
    gpu_memory_gb = serializers.IntegerField()


class LimitsOut(serializers.Serializer):
    max_runtime_hours = serializers.FloatField(allow_null=True)
    max_cost_usd = serializers.FloatField(allow_null=True)
    max_price_usd_hr = serializers.FloatField(allow_null=True)


class SshOut(serializers.Serializer):
    """How to reach a running job through the control plane's SSH gateway. Any key the job
    accepts lets its holder in: the job's `access.ssh_public_key`, or a key a member (not a
    viewer) registered for the organization in their settings."""

    host = serializers.CharField(help_text="The gateway's host name")
    port = serializers.IntegerField(help_text="The gateway's port")
    user = serializers.CharField(help_text="The job's id: the gateway's user name for the job")
    command = serializers.CharField(help_text="e.g. `ssh -p 2222 job_abc@trainyard.example.com`")
    host_key = serializers.CharField(
        help_text="The gateway's public host key (`ssh-ed25519 AAAA…`), to pin in known_hosts"
    )
    host_key_fingerprint = serializers.CharField(
        help_text="Its SHA256 fingerprint as OpenSSH prints it (`SHA256:…`)"
    )


class ContainerOut(serializers.Serializer):
    image = serializers.CharField()
    command = serializers.ListField(child=serializers.CharField(), allow_null=True)
    script_b64 = serializers.CharField(allow_null=True)
    env = serializers.DictField(child=serializers.CharField())
    secret_env = serializers.DictField(child=serializers.DictField(child=serializers.CharField()))
    workdir = serializers.CharField(allow_null=True)
    files = serializers.DictField(child=serializers.CharField())


class JobFileOut(serializers.Serializer):
    name = serializers.CharField(help_text="The file's name, e.g. `job.yaml`")
    content = serializers.CharField(help_text="The file as it was written, comments and all")


class OfferConsideredOut(serializers.Serializer):
    """One offer placement weighed for a job: `excluded` is a stable code (null: it could
    take the job now) and `message` says why in words."""

    provider = serializers.CharField()
    offer = serializers.IntegerField()
    accelerator = serializers.CharField()
    market = serializers.CharField()
    price_usd_hr = serializers.FloatField(help_text="Per GPU-hour, now")
    excluded = serializers.ChoiceField(
        choices=[(code, code) for code in placement.EXCLUSION_CODES], allow_null=True
    )
    message = serializers.CharField(allow_null=True)


class WaitingReasonOut(serializers.Serializer):
    summary = serializers.CharField()
    offers = OfferConsideredOut(many=True)


def considered_data(explanation: placement.Explanation) -> list[dict]:
    return [
        {
            "provider": c.offer.provider.name,
            "offer": c.offer.pk,
            "accelerator": c.offer.accelerator.name,
            "market": c.offer.market,
            "price_usd_hr": micros_to_usd(c.offer.price_per_gpu_hour_micros),
            "excluded": c.excluded.code if c.excluded else None,
            "message": c.excluded.message if c.excluded else None,
        }
        for c in explanation.considered
    ]


# A job waits for a place in these states (apps.jobs.execution.dispatch.WAITING).
WAITING_STATES = frozenset({JobState.REQUESTED, JobState.PREEMPTED})


def waiting_reason_data(job: Job) -> dict | None:
    """Why a waiting job is not placed, by placement's own rules; None for one that does
    not wait."""
    if job.state not in WAITING_STATES:
        return None
    explanation = placement.explain(job)
    return {"summary": explanation.summary, "offers": considered_data(explanation)}


def _request_host(request) -> str:
    """The host name (no port, no IPv6 brackets) the client called this API by; without a
    request, that of TRAINYARD_PUBLIC_URL."""
    if request is None:
        return urlsplit(settings.TRAINYARD_PUBLIC_URL).hostname or "localhost"
    host = request.get_host()
    if host.startswith("["):  # [::1]:8000
        return host[1 : host.index("]")]
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


class JobOut(serializers.Serializer):
    """A job as the API shows it. `hardware` and `price_usd_hr` describe the current (or
    last) attempt and are null before the first allocation. `ssh` is the SSH gateway's
    address while the job runs (null otherwise, and where no gateway runs); its host is
    SSH_GATEWAY_HOST, else the host name of the request (context `request`).

    `waiting_reason` (for a job waiting to be placed; null otherwise) says why no offer
    takes it, offer by offer, by the rules placement applies. It costs queries, so it is
    filled only where the view asks for it (context `explain_waiting`): the compute and
    fine-tune endpoints all do."""

    id = serializers.CharField(source="public_id")
    name = serializers.CharField()
    kind = serializers.CharField()
    project = serializers.CharField(source="project.public_id")
    priority_class = serializers.CharField()
    state = serializers.ChoiceField(choices=JobState.choices)
    reason = serializers.CharField(allow_null=True)
    compute = serializers.SerializerMethodField()
    container = serializers.SerializerMethodField()
    hardware = serializers.SerializerMethodField()
    price_usd_hr = serializers.SerializerMethodField()
    accrued_usd = serializers.SerializerMethodField()
    allocated_at = serializers.DateTimeField(allow_null=True)
    ssh = serializers.SerializerMethodField()
    limits = serializers.SerializerMethodField()
    endpoints = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    terminal_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    preemption_count = serializers.IntegerField()
    attempts = AttemptOut(many=True)
    latest_metrics = serializers.SerializerMethodField()
    waiting_reason = serializers.SerializerMethodField()
    rerun_of = serializers.SerializerMethodField()
    reruns = serializers.SerializerMethodField()
    job_file = serializers.SerializerMethodField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_rerun_of(self, job: Job) -> str | None:
        """The id of the job this one runs again (null: none, or that job is gone)."""
        if not job.rerun_of_id:
            return None
        known = getattr(job, "rerun_of_public_id", None)  # selectors' with_reruns
        return known or job.rerun_of.public_id

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_reruns(self, job: Job) -> list[str]:
        """The ids of the jobs that run this one again, oldest first."""
        return [rerun.public_id for rerun in job.reruns.all()]

    @extend_schema_field(JobFileOut(allow_null=True))
    def get_job_file(self, job: Job) -> dict | None:
        if not job.job_file_name:
            return None
        return {"name": job.job_file_name, "content": job.job_file}

    @extend_schema_field(WaitingReasonOut(allow_null=True))
    def get_waiting_reason(self, job: Job) -> dict | None:
        if not self.context.get("explain_waiting"):
            return None
        return waiting_reason_data(job)

    def _last_attempt(self, job: Job) -> Attempt | None:
        attempts = list(job.attempts.all())
        return attempts[-1] if attempts else None

    @extend_schema_field(ComputeOut())
    def get_compute(self, job: Job) -> dict:
        return job.spec["compute"]

    @extend_schema_field(ContainerOut())
    def get_container(self, job: Job) -> dict:
        # Jobs stored before workdir and files existed have neither key.
        return {"workdir": None, "files": {}, **job.spec["container"]}

    @extend_schema_field(HardwareOut(allow_null=True))
    def get_hardware(self, job: Job) -> dict | None:
        attempt = self._last_attempt(job)
        if attempt is None:
            return None
        return {
            "accelerator": attempt.accelerator,
            "gpu_count": attempt.gpu_count,
            "gpu_memory_gb": attempt.gpu_memory_gb,
        }

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_price_usd_hr(self, job: Job) -> float | None:
        attempt = self._last_attempt(job)
        return micros_to_usd(attempt.price_micros_hr) if attempt else None

    @extend_schema_field(serializers.FloatField())
    def get_accrued_usd(self, job: Job) -> float:
        return micros_to_usd(job.accrued_micros)

    @extend_schema_field(SshOut(allow_null=True))
    def get_ssh(self, job: Job) -> dict | None:
        """The gateway's address for a running job (whether or not it has an access key:
        members' registered keys open it too); null when the job is not running or this
        control plane runs no gateway (SSH_GATEWAY_PORT 0)."""
        port = settings.SSH_GATEWAY_PORT
        if not port or job.state != JobState.RUNNING:
            return None
        host = settings.SSH_GATEWAY_HOST or _request_host(self.context.get("request"))
        host_key = gateway_host_key()
        return {
            "host": host,
            "port": port,
            "user": job.public_id,
            "command": f"ssh -p {port} {job.public_id}@{host}",
            "host_key": host_key.public,
            "host_key_fingerprint": host_key.fingerprint,
        }

    @extend_schema_field(LimitsOut())
    def get_limits(self, job: Job) -> dict:
        return {
            "max_runtime_hours": job.max_runtime_hours,
            "max_cost_usd": micros_to_usd(job.max_cost_micros),
            "max_price_usd_hr": micros_to_usd(job.max_price_micros_hr),
        }

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_endpoints(self, job: Job) -> list[str]:
        return []

    @extend_schema_field(serializers.DictField(child=serializers.FloatField(allow_null=True)))
    def get_latest_metrics(self, job: Job) -> dict[str, float | None]:
        """Each series' latest value (null: NaN or infinity), from the job row: no query."""
        return selectors.latest_metrics(job)


class PlanOfferOut(serializers.Serializer):
    provider = serializers.CharField()
    offer = serializers.IntegerField()
    accelerator = serializers.CharField()
    market = serializers.CharField()
    price_usd_hr = serializers.FloatField(help_text="The whole job per hour, now")


class PlanOut(serializers.Serializer):
    """A dry run of a job create: the offer placement would take now (null: none) and
    every offer with why it is excluded. A snapshot: nothing is reserved."""

    offer = PlanOfferOut(allow_null=True)
    summary = serializers.CharField()
    offers = OfferConsideredOut(many=True)
    hold_usd = serializers.FloatField(help_text="What the job would hold at submit")


def plan_data(explanation: placement.Explanation, *, gpu_count: int, hold_micros: int) -> dict:
    chosen = explanation.chosen
    return {
        "offer": None
        if chosen is None
        else {
            "provider": chosen.provider.name,
            "offer": chosen.pk,
            "accelerator": chosen.accelerator.name,
            "market": chosen.market,
            "price_usd_hr": micros_to_usd(chosen.price_per_gpu_hour_micros * gpu_count),
        },
        "summary": explanation.summary,
        "offers": considered_data(explanation),
        "hold_usd": micros_to_usd(hold_micros),
    }


class LogLineOut(serializers.ModelSerializer):
    id = serializers.SerializerMethodField()

    class Meta:
        model = LogLine
        fields = ["id", "timestamp", "source", "stream", "message", "attempt"]

    def get_id(self, line: LogLine) -> str:
        return f"log_{line.id}"


class JobEventOut(serializers.ModelSerializer):
    id = serializers.SerializerMethodField()

    class Meta:
        model = JobEvent
        fields = ["id", "type", "message", "data", "attempt", "created_at"]

    def get_id(self, event: JobEvent) -> str:
        return f"evt_{event.id}"


class ArtifactOut(serializers.ModelSerializer):
    id = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = [
            "id",
            "kind",
            "step",
            "attempt",
            "size_bytes",
            "sha256",
            "created_at",
            "download_url",
        ]

    def get_id(self, artifact: Artifact) -> str:
        return f"art_{artifact.id}"

    def get_download_url(self, artifact: Artifact) -> str:
        return f"/api/v1/compute/jobs/{artifact.job.public_id}/artifacts/art_{artifact.id}/download"


class MetricPointOut(serializers.ModelSerializer):
    """One point of one series. `value` is null where the workload printed NaN or infinity
    (JSON has neither); `time` is when it printed the line."""

    value = serializers.SerializerMethodField()

    class Meta:
        model = MetricSample
        fields = ["name", "step", "value", "time", "attempt"]

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_value(self, point: MetricSample) -> float | None:
        return selectors.finite_or_none(point.value)


class MetricLatestOut(serializers.Serializer):
    step = serializers.IntegerField()
    value = serializers.FloatField(allow_null=True)
    time = serializers.DateTimeField()


class MetricNameOut(serializers.Serializer):
    name = serializers.CharField()
    latest = MetricLatestOut()


JobPage = page_out(JobOut, "JobPage")
LogPage = page_out(LogLineOut, "LogPage")
EventPage = page_out(JobEventOut, "EventPage")
ArtifactPage = page_out(ArtifactOut, "ArtifactPage")
MetricPage = page_out(
    MetricPointOut,
    "MetricPage",
    doc="A page of a job's metric points, with every series and its latest point.",
    names=MetricNameOut(many=True),
)
