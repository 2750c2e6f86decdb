"""The Django admin for organizations, memberships, users and API keys.

Removing a membership or changing its role here goes through the same services as every
other path (`membership_remove`, `membership_change_role`), so the API keys its user created
for the organization are revoked or capped with it; deleting a user removes each of their
memberships first (`user_delete`). A membership's user and organization are fixed once it
exists: moving it would carry the keys' owner elsewhere without either service.
"""

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet

from apps.accounts import services
from apps.accounts.models import ApiKey, Membership, Organization, User


@admin.register(User)
class TrainyardUserAdmin(UserAdmin):
    def delete_model(self, request, obj: User) -> None:
        services.user_delete(user=obj)

    def delete_queryset(self, request, queryset: QuerySet[User]) -> None:
        for user in queryset:
            services.user_delete(user=user)


class MembershipInlineForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "role", "created_at"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and "user" in self.fields:
            self.fields["user"].disabled = True


class MembershipInline(admin.TabularInline):
    model = Membership
    form = MembershipInlineForm
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "compute_enabled", "created_at"]
    list_filter = ["kind", "compute_enabled"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def save_formset(self, request, form, formset, change) -> None:
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            services.membership_remove(membership=membership)
        for membership, changed in formset.changed_objects:
            if "role" in changed:
                services.membership_change_role(membership=membership, role=membership.role)
            membership.save()
        for membership in formset.new_objects:
            membership.save()
        formset.save_m2m()


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "organization", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "organization__slug"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        return [*self.readonly_fields, "user", "organization"]

    def save_model(self, request, obj: Membership, form, change) -> None:
        if change and "role" in form.changed_data:
            services.membership_change_role(membership=obj, role=obj.role)
        super().save_model(request, obj, form, change)

    def delete_model(self, request, obj: Membership) -> None:
        services.membership_remove(membership=obj)

    def delete_queryset(self, request, queryset: QuerySet[Membership]) -> None:
        for membership in queryset:
            services.membership_remove(membership=membership)


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
