"""The fine-tune's forms: the New Job page's fine-tune tab and the dataset upload."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.finetunes import datasets, hub_refs, payloads
from apps.finetunes.demo import demo_finetune_initial
from apps.finetunes.models import Dataset
from apps.hub.models import RepoKind
from apps.jobs.models import Job
from apps.jobs.specs import DEFAULT_DISK_GB
from apps.jobs.web.forms import JobForm, resolve_secret_refs
from apps.projects.models import Project
from trainer.formats import FORMAT_CHOICES


class DatasetUploadForm(forms.Form):
    name = forms.CharField(label="Name", max_length=200)
    file = forms.FileField(label="File", help_text="JSONL (one JSON object per line) or CSV.")
    dataset_format = forms.ChoiceField(label="Dataset format", choices=FORMAT_CHOICES)


class FinetuneJobForm(JobForm):
    """A LoRA fine-tune of an open-weight model, the reference dashboard's fields. The New
    Job page finds it through the fine-tune kind's `form_class` (`apps.finetunes.kind`)."""

    form_id = "finetune"
    kind = Job.Kind.FINETUNE
    title = "Fine-tune"
    section_template = "finetunes/partials/new_job_form.html"
    quote_target = "finetune-quote"
    default_disk_gb = DEFAULT_DISK_GB["finetune"]
    field_order = [
        "name",
        "model",
        "dataset",
        "dataset_format",
        "max_samples",
        "max_steps",
        "learning_rate",
        "merge",
        "accelerator",
        "gpu_count",
        "disk_gb",
        "priority_class",
        "secrets",
    ]
    param_fields = (
        *JobForm.param_fields,
        ("dataset", "dataset"),
        ("dataset_format", "dataset_format"),
        ("container.secret_env", "secrets"),
    )
    keyed_fields = frozenset({"secrets"})

    model = forms.CharField(
        label="Model",
        max_length=500,
        help_text="A model of this organization's hub, <code>org/name</code> or "
        "<code>org/name@revision</code>; a Hugging Face repo id, e.g. "
        "<code>Qwen/Qwen2.5-0.5B-Instruct</code>; or a path on the host (single-tenant hosts).",
    )
    dataset = forms.CharField(
        label="Dataset",
        max_length=500,
        help_text="One of this project's uploaded datasets (<code>ds_…</code>), a dataset of "
        "this organization's hub (<code>org/name[@revision]</code>), a Hugging Face dataset "
        "id, e.g. <code>tatsu-lab/alpaca</code>, or a path on the host (single-tenant hosts).",
        widget=forms.TextInput(attrs={"list": "finetune-dataset-choices", "autocomplete": "off"}),
    )
    dataset_format = forms.ChoiceField(
        label="Dataset format",
        choices=FORMAT_CHOICES,
        initial="alpaca",
        help_text="How the rows become training text: Alpaca (instruction / input / output), "
        "ChatML (a messages list), ShareGPT, prompt-completion, plain text or pre-tokenized.",
    )
    max_samples = forms.IntegerField(
        label="Max samples", required=False, min_value=1, help_text="Empty trains on all rows."
    )
    max_steps = forms.IntegerField(
        label="Max steps", required=False, min_value=1, help_text="Empty trains by epochs."
    )
    learning_rate = forms.FloatField(label="Learning rate", initial=0.0002)
    merge = forms.BooleanField(
        label="Also publish merged weights",
        required=False,
        help_text="The base model with the adapter merged in, beside the adapter in its hub "
        "repository (<code>merged/</code>): for runtimes without LoRA support.",
    )

    secrets = forms.CharField(
        label="Secrets",
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 2, "class": "code", "spellcheck": "false", "autocomplete": "off"}
        ),
        help_text="One <code>NAME=SECRET_ID:KEY</code> a line (a secret's name works in place of "
        "its id), as for a container job and the CLI's <code>--secret</code>; "
        "e.g. <code>WANDB_API_KEY=wandb:WANDB_API_KEY</code> or "
        "<code>MLFLOW_TRACKING_URI=mlflow:MLFLOW_TRACKING_URI</code> to report the run to W&amp;B "
        "or MLflow.",
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        self.project = project
        super().__init__(*args, **kwargs)

    @classmethod
    def for_page(
        cls,
        data: Any,
        *,
        organization: Organization,
        project: Project,
        quote_url: str,
        initial: dict | None = None,
    ) -> FinetuneJobForm:
        """Prefilled with `initial` ("Edit and run"), else with the demo model and dataset
        where `seed_demo` published them."""
        return cls(
            data=data,
            quote_url=quote_url,
            initial=initial if initial is not None else demo_finetune_initial(organization),
            project=project,
        )

    @classmethod
    def initial_from(cls, job: Job) -> dict:
        """The trainer config the fine-tune was started with, and its compute."""
        config = payloads.config_of(job) or {}
        initial = super().initial_from(job)
        for name in payloads.CONFIG_FIELDS:
            initial[name] = config.get(name)
        initial["merge"] = bool(config.get("merge"))
        return initial

    @cached_property
    def uploaded_datasets(self) -> list[Dataset]:
        """The project's datasets the Dataset field offers (its datalist)."""
        return list(datasets.project_datasets(self.project))

    def clean_learning_rate(self) -> float:
        rate = self.cleaned_data["learning_rate"]
        if rate <= 0:
            raise ValidationError("Must be greater than zero.")
        return rate

    def clean_secrets(self) -> dict[str, dict[str, str]]:
        refs = resolve_secret_refs(
            self.cleaned_data["secrets"], organization=self.project.organization
        )
        if payloads.CONFIG_ENV in refs:
            raise ValidationError(
                f"{payloads.CONFIG_ENV} carries the trainer's config and cannot come from a secret."
            )
        return refs

    def clean(self) -> dict:
        """An uploaded dataset must be the project's and is trained as its own format."""
        data = super().clean()
        dataset, dataset_format = data.get("dataset"), data.get("dataset_format")
        for field, kind in (("model", RepoKind.MODEL), ("dataset", RepoKind.DATASET)):
            if data.get(field):
                try:
                    hub_refs.check_hub_reference(
                        project=self.project, value=data[field], kind=kind, param=field
                    )
                except InvalidRequest as error:
                    self.add_service_error(error)
        if dataset and dataset_format:
            try:
                datasets.check_dataset(
                    project=self.project, dataset=dataset, dataset_format=dataset_format
                )
            except InvalidRequest as error:
                self.add_service_error(error)
        return data

    def config(self) -> dict:
        """What the trainer reads from $FINETUNE_CONFIG."""
        data = self.cleaned_data
        config = {name: data[name] for name in payloads.CONFIG_FIELDS}
        if data.get("merge"):
            config["merge"] = True
        return config

    def carry_over(self, payload: dict, source: Job) -> dict:
        """The source fine-tune's limits (the form has no fields for them)."""
        limits = payloads.request_of(source).get("limits")
        if limits:
            payload["limits"] = limits
        return payload

    def payload(self, *, project_id: str) -> dict:
        return payloads.job_payload(
            name=self.cleaned_data["name"],
            project_id=project_id,
            config=self.config(),
            compute=self._compute(),
            priority_class=self.cleaned_data["priority_class"],
            secret_env=self.cleaned_data["secrets"],
        )
