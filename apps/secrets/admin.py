from django.contrib import admin
from django.db.models import QuerySet

from apps.secrets import services
from apps.secrets.models import Secret


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    """Operators may see that a secret exists, its key names and delete it; values and the
    ciphertext are never shown, and values are only ever set through the API."""

    list_display = ["name", "organization", "public_id", "keys", "created_at", "updated_at"]
    list_filter = ["organization"]
    search_fields = ["name", "public_id", "organization__slug"]
    fields = ["public_id", "name", "organization", "keys", "created_at", "updated_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj: Secret) -> None:
        services.secret_delete(secret=obj)

    def delete_queryset(self, request, queryset: QuerySet[Secret]) -> None:
        for secret in queryset:
            services.secret_delete(secret=secret)
