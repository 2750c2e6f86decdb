from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from apps.accounts.models import ApiKey, Membership, Organization, User

admin.site.register(User, UserAdmin)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "compute_enabled", "created_at"]
    list_filter = ["kind", "compute_enabled"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "organization", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "organization__slug"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created from the org settings page or `create_api_key`, where the secret is
    shown once; the admin can only inspect and revoke them."""

    list_display = ["prefix", "name", "organization", "role", "last_used_at", "revoked_at"]
    list_filter = ["role"]
    search_fields = ["prefix", "name", "organization__slug"]
    readonly_fields = ["prefix", "hashed_key", "created_at", "last_used_at", "created_by"]

    def has_add_permission(self, request) -> bool:
        return False
