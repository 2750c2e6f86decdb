"""The New sweep form: the API's body in form fields, the template and the parameters as
YAML (JSON is YAML too). Its `body()` is what `services.sweep_create` validates, so the
page refuses what the API refuses, with the same words."""

from __future__ import annotations

import yaml
from django import forms

from apps.sweeps.models import Sweep

TEMPLATE_EXAMPLE = """\
name: tiny
model: demo/tiny
dataset: ds_…
dataset_format: alpaca
max_steps: 10"""
PARAMS_EXAMPLE = """\
learning_rate: [1.0e-4, 3.0e-4]
max_steps: [10, 20]"""


def _mapping(text: str, field: str) -> dict:
    try:
        value = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise forms.ValidationError(f"Not valid YAML{where}: {error.problem}.") from None
    except yaml.YAMLError:
        raise forms.ValidationError("Not valid YAML.") from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f"Give the {field} as a mapping of fields to values.")
    return value


class SweepForm(forms.Form):
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=Sweep.Kind.choices, initial=Sweep.Kind.FINETUNE)
    template = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 7, "placeholder": TEMPLATE_EXAMPLE}),
        help_text="A fine-tune body as the API takes it (or a job body, for kind container), "
        "in YAML or JSON.",
    )
    params = forms.CharField(
        label="Parameters",
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": PARAMS_EXAMPLE}),
        help_text="Dotted path: list of values. For random, also {min: …, max: …, log: true}.",
    )
    method = forms.ChoiceField(choices=Sweep.Method.choices, initial=Sweep.Method.GRID)
    samples = forms.IntegerField(required=False, min_value=1, help_text="Random only.")
    seed = forms.IntegerField(required=False, initial=0, help_text="Random only.")
    concurrency = forms.IntegerField(min_value=1, initial=2)
    max_cost_usd = forms.DecimalField(
        label="Cost cap (USD)", required=False, min_value=0, decimal_places=6
    )
    objective = forms.CharField(max_length=100, initial="loss")
    direction = forms.ChoiceField(choices=Sweep.Direction.choices, initial=Sweep.Direction.MINIMIZE)

    def clean_template(self) -> dict:
        return _mapping(self.cleaned_data["template"], "template")

    def clean_params(self) -> dict:
        return _mapping(self.cleaned_data["params"], "parameters")

    def body(self) -> dict:
        """The API's body from the cleaned fields (the empty optional ones left out)."""
        data = self.cleaned_data
        body = {key: value for key, value in data.items() if value not in (None, "")}
        if "max_cost_usd" in body:
            body["max_cost_usd"] = str(body["max_cost_usd"])
        return body

    def add_api_error(self, param: str | None, message: str) -> None:
        """Show an API error at the field its `param` names (`params.learning_rate` at
        Parameters, `template.max_steps` at Template), or above the form."""
        field = (param or "").split(".", 1)[0]
        self.add_error(field if field in self.fields else None, message)
