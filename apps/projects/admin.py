from django.contrib import admin

from apps.projects.models import Project


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "organization", "public_id", "created_at"]
    list_filter = ["organization"]
    search_fields = ["slug", "name", "public_id"]
    readonly_fields = ["public_id"]
