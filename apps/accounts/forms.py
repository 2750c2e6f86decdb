from django import forms

from apps.accounts.models import Role
from apps.core.ssh_keys import InvalidPublicKey, parse_public_key


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. 'ci'.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, max_role: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Nobody hands out more power than they hold.
        allowed = Role.values[: Role.values.index(max_role) + 1]
        self.fields["role"].choices = [c for c in Role.choices if c[0] in allowed]

    def clean_name(self) -> str:
        # Whether another active key has the name is the service's to say (under a lock).
        return self.cleaned_data["name"].strip()


class SshKeyAddForm(forms.Form):
    """One public key for the signed-in member; the service checks it again and refuses a
    key already registered in the organization."""

    public_key = forms.CharField(
        label="Public key",
        max_length=16384,
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "spellcheck": "false",
                "autocomplete": "off",
                "placeholder": "ssh-ed25519 AAAA… you@host",
            }
        ),
        help_text="The contents of your <code>~/.ssh/id_ed25519.pub</code> (or another "
        "<code>.pub</code> file).",
    )
    name = forms.CharField(
        label="Key name",
        max_length=100,
        required=False,
        help_text="Optional; the key's comment (e.g. you@laptop) when left empty.",
    )

    def __init__(self, *args, **kwargs) -> None:
        # The API key form on the same page has a `name` too: ids of our own.
        kwargs.setdefault("auto_id", "id_ssh_%s")
        super().__init__(*args, **kwargs)

    def clean_public_key(self) -> str:
        value = self.cleaned_data["public_key"]
        try:
            parse_public_key(value)
        except InvalidPublicKey as exc:
            raise forms.ValidationError(str(exc)) from exc
        return value.strip()
