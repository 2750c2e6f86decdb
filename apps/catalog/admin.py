from django.contrib import admin

from apps.catalog.models import Accelerator


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "vendor", "memory_gb"]
    search_fields = ["name", "display_name"]
