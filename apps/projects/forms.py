from django import forms


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200)
    slug = forms.SlugField(
        max_length=64, required=False, help_text="Used in URLs. Left empty, made from the name."
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
