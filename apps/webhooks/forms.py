from django import forms

from apps.webhooks.events import EventType
from apps.webhooks.models import Webhook


class WebhookForm(forms.Form):
    url = forms.CharField(
        label="URL", max_length=2000, widget=forms.URLInput(attrs={"placeholder": "https://"})
    )
    events = forms.MultipleChoiceField(
        choices=EventType.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[EventType.JOB_FAILED, EventType.JOB_SUCCEEDED],
    )
    format = forms.ChoiceField(choices=Webhook.Format.choices, initial=Webhook.Format.JSON)
    description = forms.CharField(max_length=200, required=False)
