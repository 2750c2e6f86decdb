from django import forms

from apps.accounts.models import ApiKey, Organization, Role


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. 'ci'.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(
        self, *args, max_role: str, organization: Organization | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.organization = organization
        # Nobody hands out more power than they hold.
        allowed = Role.values[: Role.values.index(max_role) + 1]
        self.fields["role"].choices = [c for c in Role.choices if c[0] in allowed]

    def clean_name(self) -> str:
        """A name no active key of the organization has: the settings page and the CLI tell
        keys apart by name."""
        name = self.cleaned_data["name"].strip()
        taken = self.organization is not None and (
            ApiKey.objects.active()
            .filter(organization=self.organization, name__iexact=name)
            .exists()
        )
        if taken:
            raise forms.ValidationError(
                f"An active key is already named {name!r}: choose another name, or revoke it first."
            )
        return name
