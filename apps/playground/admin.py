"""The Playground's servers in the admin: which serve job each runs and what it has loaded.
Read-only: a server's job is stopped from its job page, or by the idle stop."""

from __future__ import annotations

from django.contrib import admin

from apps.playground.models import PlaygroundAdapter, PlaygroundServer


class PlaygroundAdapterInline(admin.TabularInline):
    model = PlaygroundAdapter
    extra = 0
    can_delete = False
    fields = ["served_name", "artifact", "hub_commit", "loaded_on_attempt", "last_used_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(PlaygroundServer)
class PlaygroundServerAdmin(admin.ModelAdmin):
    list_display = ["base_model", "organization", "job", "started_by", "last_used_at"]
    list_select_related = ["organization", "job", "started_by"]
    search_fields = ["base_model", "organization__slug"]
    readonly_fields = [
        "organization",
        "base_model",
        "job",
        "started_by",
        "created_at",
        "last_used_at",
    ]
    inlines = [PlaygroundAdapterInline]

    def has_add_permission(self, request) -> bool:
        return False
