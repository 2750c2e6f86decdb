"""Jobs in the admin are for looking, not editing: state changes go through the services.
The one operator action, "reclaim", takes a running job's hardware back as a provider would
(apps.jobs.execution.preemption.reclaim_attempt)."""

from django.contrib import admin, messages

from apps.jobs.execution import preemption
from apps.jobs.models import Artifact, Attempt, Job, JobEvent


class AttemptInline(admin.TabularInline):
    model = Attempt
    fk_name = "job"
    extra = 0
    can_delete = False
    fields = [
        "number",
        "provider",
        "accelerator",
        "gpu_count",
        "price_micros_hr",
        "allocated_at",
        "started_at",
        "ended_at",
        "exit_code",
        "end_reason",
        "preempted_by",
        "billed_minutes",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class EventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "type", "message", "data"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "public_id",
        "name",
        "organization",
        "project",
        "state",
        "reason",
        "accelerator",
        "gpu_count",
        "created_at",
    ]
    list_filter = ["state", "kind", "priority_class"]
    search_fields = ["public_id", "name", "organization__slug"]
    list_select_related = ["organization", "project"]
    inlines = [AttemptInline, EventInline]
    actions = ["reclaim"]

    @admin.action(description="Reclaim hardware (the job is preempted and resumes)")
    def reclaim(self, request, queryset) -> None:
        reclaimed, skipped = [], []
        for job in queryset:
            try:
                preemption.reclaim_attempt(job)
            except preemption.NothingToReclaim:
                skipped.append(job.public_id)
            else:
                reclaimed.append(job.public_id)
        if reclaimed:
            self.message_user(request, f"Reclaiming: {', '.join(reclaimed)}.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Not running, nothing to reclaim: {', '.join(skipped)}.", messages.WARNING
            )

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Job._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ["job", "kind", "step", "size_bytes", "sha256", "created_at"]
    list_filter = ["kind"]
    search_fields = ["job__public_id", "sha256"]
    readonly_fields = [
        "job",
        "attempt",
        "kind",
        "step",
        "size_bytes",
        "sha256",
        "storage_path",
        "created_at",
    ]
