"""The New Job page's forms: the container form here, and the form each job kind supplies
through its `JobKind.form_class` (the fine-tune form is `apps.finetunes.forms`). Each turns
what a person typed into the request body the API takes (`apps.jobs.specs`), so
`services.job_create` validates them alike, and puts the service's `InvalidRequest` back
next to the field its dotted `param` names.

The forms check only what the page's own syntax needs (a command line that splits, one
`NAME=value` per line, secret names that exist); everything the API checks is left to the
service, so the page and the API can never disagree on what a valid job is.
"""

from __future__ import annotations

import base64
import shlex
from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q

from apps.accounts.models import Organization
from apps.catalog.models import Accelerator
from apps.core.errors import ApiError
from apps.core.money import MICROS_PER_USD
from apps.jobs.models import Job
from apps.jobs.specs import DEFAULT_DISK_GB, MAX_DISK_GB
from apps.projects.models import Project
from apps.secrets.models import Secret

# Every count any accelerator comes in; the service rejects one the chosen accelerator lacks
# (and the live quote says so before submitting).
GPU_COUNT_CHOICES = [(count, str(count)) for count in range(1, 9)]

# Fields besides the compute choice that change what a job holds at submit.
HOLD_FIELDS = ("priority_class", "max_price_usd_hr", "max_cost_usd")

PRIORITY_CLASSES = [
    ("standard", "Standard"),
    ("preemptible", "Preemptible"),
]


def _textarea(rows: int, *, code: bool = True) -> forms.Textarea:
    attrs: dict[str, Any] = {"rows": rows}
    if code:
        attrs.update({"class": "code", "spellcheck": "false", "autocomplete": "off"})
    return forms.Textarea(attrs=attrs)


def _lines(text: str):
    """(line number, line) for each line that is not blank or a `#` comment."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def parse_env(text: str) -> dict[str, str]:
    """`NAME=value`, one a line, into a dict. The value is kept exactly as typed after the
    first `=`; names are checked by the service (`container.env.NAME`)."""
    env: dict[str, str] = {}
    errors: list[str] = []
    for number, line in _lines(text):
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            errors.append(f"Line {number}: expected NAME=value.")
        elif name in env:
            errors.append(f"Line {number}: {name} is set twice.")
        else:
            env[name] = value
    if errors:
        raise ValidationError(errors)
    return env


def parse_secret_refs(text: str) -> dict[str, tuple[str, str]]:
    """`NAME=SECRET_ID:KEY`, one a line (the CLI's `--secret` syntax), into {NAME: (secret
    reference, KEY)}; the reference is a secret's id (`sec_…`) or, for people typing, its
    name. Without `:KEY` the key is NAME itself (`HF_TOKEN=hf` reads key HF_TOKEN of secret
    hf). Neither ids nor secret names contain `:`, so the first one splits."""
    refs: dict[str, tuple[str, str]] = {}
    errors: list[str] = []
    for number, line in _lines(text):
        env_name, sep, ref = line.partition("=")
        env_name = env_name.strip()
        secret_name, _, key = ref.strip().partition(":")
        if not sep or not env_name or not secret_name.strip():
            errors.append(f"Line {number}: expected NAME=SECRET_ID:KEY.")
        elif env_name in refs:
            errors.append(f"Line {number}: {env_name} is set twice.")
        else:
            refs[env_name] = (secret_name.strip(), key.strip() or env_name)
    if errors:
        raise ValidationError(errors)
    return refs


def _usd(micros: int | None) -> Decimal | None:
    return None if micros is None else Decimal(micros) / MICROS_PER_USD


def accelerator_choices() -> list[tuple[str, str]]:
    # Smallest first: `cpu` (memory 0) leads, the way people scan for "enough".
    return list(
        Accelerator.objects.order_by("memory_gb", "name").values_list("name", "display_name")
    )


class JobForm(forms.Form):
    """What every form of the page shares: the compute choice, the live quote on it, field ids
    prefixed with the form's id (two forms on one page both have a "Job name"), the mapping
    of the service's error `param`s to fields, and its tab on the page (`title`, and the
    `section_template` the page includes with `form` and `quote` set)."""

    form_id: str = ""
    kind: str = Job.Kind.CONTAINER
    title: str = ""
    section_template: str = ""
    quote_target: str = ""
    default_disk_gb: int = DEFAULT_DISK_GB["container"]
    # (param prefix, field): `param` equal to the prefix, or below it (`prefix.x`, `prefix[0]`).
    param_fields: tuple[tuple[str, str], ...] = (
        ("name", "name"),
        ("priority_class", "priority_class"),
        ("compute.accelerator", "accelerator"),
        ("compute.gpu_count", "gpu_count"),
        ("compute.ephemeral_disk_gb", "disk_gb"),
    )
    # Fields whose service errors name an entry (`container.env.NAME`); the entry goes first.
    keyed_fields: frozenset[str] = frozenset()

    name = forms.CharField(label="Job name", max_length=200)
    # Not required: a post without it (a script written before it existed) gets standard.
    priority_class = forms.ChoiceField(
        label="Priority class",
        choices=PRIORITY_CLASSES,
        initial="standard",
        required=False,
        help_text="Preemptible jobs may be stopped to make room for standard ones; they "
        "keep their place and resume from their newest checkpoint.",
    )
    accelerator = forms.ChoiceField(label="Accelerator", initial="cpu")
    # "Count", not "GPU count": the default accelerator, cpu, has no GPU (it comes as 1).
    gpu_count = forms.TypedChoiceField(
        label="Count",
        coerce=int,
        choices=GPU_COUNT_CHOICES,
        initial=1,
        help_text="How many of the accelerator: GPUs for a GPU; cpu comes as 1.",
    )
    disk_gb = forms.IntegerField(
        label="Disk (GB)",
        min_value=1,
        max_value=MAX_DISK_GB,
        help_text="Scratch disk for the job; gone when it ends.",
    )

    def __init__(self, *args: Any, quote_url: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", f"{self.form_id}-%s")
        # Labels read exactly "Job name", "Script", … (no ":"), so they can be found by name.
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["accelerator"].choices = accelerator_choices()
        self.fields["disk_gb"].initial = self.default_disk_gb
        if quote_url:
            live = {
                "hx-get": quote_url,
                "hx-trigger": "change",
                "hx-target": f"#{self.quote_target}",
                "hx-include": f"#{self.form_id}-accelerator, #{self.form_id}-gpu_count",
                # A quick second change aborts the first request, so answers cannot cross.
                "hx-sync": "closest form:replace",
            }
            for name in ("accelerator", "gpu_count"):
                self.fields[name].widget.attrs.update(live)
            # The quote also shows the hold, which the priority class and limits change
            # (js/new-job.js adds them to every quote request of the form).
            for name in HOLD_FIELDS:
                if name in self.fields:
                    self.fields[name].widget.attrs.update(live)

    @classmethod
    def for_page(
        cls,
        data: Any,
        *,
        organization: Organization,
        project: Project,
        quote_url: str,
        initial: dict | None = None,
    ) -> JobForm:
        """The form as the New Job page shows it; `data` is the POST when this form was the
        one submitted, else None; `initial` prefills it ("Edit and run", `initial_from`).
        A form that needs more (a project) overrides this."""
        return cls(data=data, quote_url=quote_url, initial=initial)

    @classmethod
    def initial_from(cls, job: Job) -> dict:
        """The form's values that would make `job` again: "Edit and run" opens the page
        with them. The fields every form shares; a form adds its own."""
        spec = job.spec
        return {
            "name": spec["name"],
            "priority_class": spec["priority_class"],
            "accelerator": spec["compute"]["accelerator"],
            "gpu_count": spec["compute"]["gpu_count"],
            "disk_gb": spec["compute"]["ephemeral_disk_gb"],
        }

    def clean_priority_class(self) -> str:
        return self.cleaned_data["priority_class"] or "standard"

    def payload(self, *, project_id: str) -> dict:
        """The API request body for the cleaned form. Call only after `is_valid()`."""
        raise NotImplementedError

    def carry_over(self, payload: dict, source: Job) -> dict:
        """The request `payload` (this form's, from "Edit and run" of `source`) with what
        `source` had that the form has no field for, so editing a copy keeps it."""
        return payload

    def _compute(self) -> dict:
        data = self.cleaned_data
        return {
            "accelerator": data["accelerator"],
            "gpu_count": data["gpu_count"],
            "ephemeral_disk_gb": data["disk_gb"],
        }

    def field_for_param(self, param: str | None) -> tuple[str | None, str | None]:
        """The field a service error belongs to (None: the form as a whole), and the entry it
        names inside a keyed field (`container.env.HF_HOME` → ("env", "HF_HOME"))."""
        dotted = param or ""
        for prefix, field in self.param_fields:
            if dotted == prefix or dotted.startswith(f"{prefix}["):
                return field, None
            if dotted.startswith(f"{prefix}."):
                entry = dotted[len(prefix) + 1 :]
                return field, entry if field in self.keyed_fields else None
        return None, None

    def add_service_error(self, error: ApiError) -> None:
        field, entry = self.field_for_param(error.param)
        message = str(error.detail)
        self.add_error(field, f"{entry}: {message}" if entry else message)

    def focus_first_error(self) -> None:
        """Autofocus the first field with an error, so the browser scrolls the page to it
        (both forms are on one page and the one that failed may be further down)."""
        for name, field in self.fields.items():
            if name in self.errors:
                field.widget.attrs["autofocus"] = True
                return


def resolve_secret_refs(text: str, *, organization: Organization) -> dict[str, dict[str, str]]:
    """A Secrets field's lines as {ENV_NAME: {secret_id, key}}, each reference (an id, else a
    name) resolved within `organization`; ValidationError names every line that does not
    resolve."""
    refs = parse_secret_refs(text)
    if not refs:
        return {}
    wanted = {reference for reference, _ in refs.values()}
    found: dict[str, Secret] = {}
    secrets = (
        Secret.objects.for_org(organization)
        .filter(Q(public_id__in=wanted) | Q(name__in=wanted))
        .only("name", "public_id", "keys")
    )
    for secret in secrets:
        found.setdefault(secret.name, secret)
        found[secret.public_id] = secret  # an id wins over another secret's equal name
    resolved: dict[str, dict[str, str]] = {}
    errors: list[str] = []
    for env_name, (reference, key) in refs.items():
        secret = found.get(reference)
        if secret is None:
            errors.append(
                f"{env_name}: no secret {reference} (by id or name) in this organization."
            )
        elif key not in secret.keys:
            errors.append(f"{env_name}: secret {reference} has no key {key}.")
        else:
            resolved[env_name] = {"secret_id": secret.public_id, "key": key}
    if errors:
        raise ValidationError(errors)
    return resolved


class ContainerJobForm(JobForm):
    """Any image, with a command or a script."""

    form_id = "container"
    kind = Job.Kind.CONTAINER
    title = "Container"
    section_template = "jobs/partials/new_job_container.html"
    quote_target = "quote"
    default_disk_gb = DEFAULT_DISK_GB["container"]
    param_fields = (
        *JobForm.param_fields,
        ("container.image", "image"),
        ("container.command", "command"),
        ("container.script_b64", "script"),
        ("container.env", "env"),
        ("container.secret_env", "secrets"),
        ("access.ssh_public_key", "ssh_public_key"),
        ("limits.max_runtime_hours", "max_runtime_hours"),
        ("limits.max_cost_usd", "max_cost_usd"),
        ("limits.max_price_usd_hr", "max_price_usd_hr"),
    )
    keyed_fields = frozenset({"env", "secrets"})
    field_order = [
        "name",
        "image",
        "command",
        "script",
        "script_b64",
        "accelerator",
        "gpu_count",
        "disk_gb",
        "priority_class",
        "env",
        "secrets",
        "max_runtime_hours",
        "max_cost_usd",
        "max_price_usd_hr",
        "ssh_public_key",
    ]

    image = forms.CharField(
        label="Image",
        max_length=500,
        help_text="A container image, e.g. <code>python:3.11-slim</code>.",
    )
    command = forms.CharField(
        label="Command",
        required=False,
        max_length=100_000,
        help_text="One line, split the way a shell would: "
        "<code>python train.py --epochs 3</code>. Or give a script below.",
    )
    script = forms.CharField(
        label="Script",
        required=False,
        strip=False,
        widget=_textarea(8),
        help_text="A bash script, run instead of a command.",
    )
    script_b64 = forms.CharField(
        label="Script (base64)",
        required=False,
        widget=_textarea(2),
        help_text="Or paste the script base64-encoded (line breaks are ignored).",
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        strip=False,
        widget=_textarea(4),
        help_text="One <code>NAME=value</code> a line.",
    )
    secrets = forms.CharField(
        label="Secrets",
        required=False,
        widget=_textarea(3),
        help_text="One <code>NAME=SECRET_ID:KEY</code> a line, as the CLI's "
        "<code>--secret</code> (a secret's name works in place of its id; without "
        "<code>:KEY</code> the key is NAME); the value is read when the job starts and never "
        "stored with it.",
    )
    max_runtime_hours = forms.FloatField(
        label="Max runtime (hours)",
        required=False,
        help_text="Optional; the job is stopped after running this long.",
    )
    max_cost_usd = forms.DecimalField(
        label="Max cost (USD)",
        required=False,
        max_digits=14,
        decimal_places=6,
        help_text="Optional; the job is stopped when it has cost this much.",
    )
    max_price_usd_hr = forms.DecimalField(
        label="Price ceiling (USD/h)",
        required=False,
        max_digits=14,
        decimal_places=6,
        help_text="Optional; only hardware costing at most this per hour, for the whole "
        "job, is used.",
    )
    ssh_public_key = forms.CharField(
        label="SSH public key",
        required=False,
        widget=_textarea(2),
        help_text="Optional, e.g. <code>ssh-ed25519 AAAA… you@host</code>.",
    )

    def __init__(self, *args: Any, organization: Organization, **kwargs: Any) -> None:
        self.organization = organization
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
    ) -> ContainerJobForm:
        return cls(data=data, organization=organization, quote_url=quote_url, initial=initial)

    @classmethod
    def initial_from(cls, job: Job) -> dict:
        """The container job's own fields too: its command as one shell line, its script
        as text, env and secrets one a line (secrets by name), limits in dollars."""
        container = job.spec["container"]
        limits = job.spec.get("limits") or {}
        initial = super().initial_from(job)
        initial["image"] = container["image"]
        if container.get("command"):
            initial["command"] = shlex.join(container["command"])
        elif container.get("script_b64"):
            script = base64.b64decode(container["script_b64"])
            try:
                initial["script"] = script.decode()
            except UnicodeDecodeError:  # not text: left as it was given
                initial["script_b64"] = container["script_b64"]
        initial["env"] = "\n".join(f"{k}={v}" for k, v in (container.get("env") or {}).items())
        refs = container.get("secret_env") or {}
        names = dict(
            Secret.objects.for_org(job.organization)
            .filter(public_id__in=[ref["secret_id"] for ref in refs.values()])
            .values_list("public_id", "name")
        )
        initial["secrets"] = "\n".join(
            f"{env}={names.get(ref['secret_id'], ref['secret_id'])}:{ref['key']}"
            for env, ref in refs.items()
        )
        initial["max_runtime_hours"] = limits.get("max_runtime_hours")
        initial["max_cost_usd"] = _usd(limits.get("max_cost_micros"))
        initial["max_price_usd_hr"] = _usd(limits.get("max_price_micros_hr"))
        initial["ssh_public_key"] = (job.spec.get("access") or {}).get("ssh_public_key") or ""
        return initial

    def clean_command(self) -> list[str] | None:
        line = self.cleaned_data["command"]
        if not line:
            return None
        try:
            argv = shlex.split(line)
        except ValueError as exc:  # e.g. "No closing quotation"
            raise ValidationError(f"This command does not split into words: {exc}.") from exc
        return argv or None

    def clean_script(self) -> str | None:
        # Browsers send textareas with CRLF line ends, which bash does not forgive.
        script = self.cleaned_data["script"].replace("\r\n", "\n")
        if not script.strip():
            return None
        return base64.b64encode(script.encode()).decode()

    def clean_script_b64(self) -> str | None:
        # Otherwise as pasted: the service judges whether it is base64 and reports it here.
        # Whitespace goes because `base64` wraps its output at 76 columns.
        return "".join(self.cleaned_data["script_b64"].split()) or None

    def clean_env(self) -> dict[str, str]:
        return parse_env(self.cleaned_data["env"])

    def clean_secrets(self) -> dict[str, dict[str, str]]:
        return resolve_secret_refs(self.cleaned_data["secrets"], organization=self.organization)

    def clean_ssh_public_key(self) -> str | None:
        return self.cleaned_data["ssh_public_key"] or None

    def clean(self) -> dict:
        data = super().clean()
        sources = ("command", "script", "script_b64")
        given = [name for name in sources if data.get(name)]
        if not given and not any(name in self.errors for name in sources):
            self.add_error("command", "Give a command or a script.")
        elif len(given) > 1:
            self.add_error(given[-1], "Give one of a command, a script or a base64 script.")
        return data

    def add_service_error(self, error: ApiError) -> None:
        if error.param == "container.script_b64" and self.cleaned_data.get("script_b64"):
            self.add_error("script_b64", str(error.detail))
            return
        super().add_service_error(error)

    def carry_over(self, payload: dict, source: Job) -> dict:
        """The code the source job shipped (`workdir`, `files`): the form cannot show it."""
        shipped = source.spec["container"]
        for name in ("workdir", "files"):
            if shipped.get(name):
                payload["container"][name] = shipped[name]
        return payload

    def payload(self, *, project_id: str) -> dict:
        data = self.cleaned_data
        container: dict[str, Any] = {
            "image": data["image"],
            "env": data["env"],
            "secret_env": data["secrets"],
        }
        if data["command"] is not None:
            container["command"] = data["command"]
        else:
            container["script_b64"] = data["script_b64"] or data["script"]
        body: dict[str, Any] = {
            "name": data["name"],
            "project": project_id,
            "priority_class": data["priority_class"],
            "compute": self._compute(),
            "container": container,
        }
        limits = {
            name: value if isinstance(value, float) else str(value)
            for name in ("max_runtime_hours", "max_cost_usd", "max_price_usd_hr")
            if (value := data[name]) is not None
        }
        if limits:
            body["limits"] = limits
        if data["ssh_public_key"]:
            body["access"] = {"ssh_public_key": data["ssh_public_key"]}
        return body
