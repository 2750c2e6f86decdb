from django import forms

from apps.accounts.models import Role


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. 'ci'.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, max_role: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Nobody hands out more power than they hold.
        allowed = Role.values[: Role.values.index(max_role) + 1]
        self.fields["role"].choices = [c for c in Role.choices if c[0] in allowed]
