from django import forms

from apps.jobs.finetune import DATASET_FORMATS


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200)
    slug = forms.SlugField(
        max_length=64, required=False, help_text="Used in URLs. Left empty, made from the name."
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)


class DatasetUploadForm(forms.Form):
    name = forms.CharField(label="Name", max_length=200)
    file = forms.FileField(label="File", help_text="JSONL (one JSON object per line) or CSV.")
    dataset_format = forms.ChoiceField(label="Dataset format", choices=DATASET_FORMATS)
