"""Validation of a job request into the normalised spec a Job stores.

The same validation serves the API and the dashboard's forms (through
`apps.jobs.services.job_create`). Errors carry a dotted `param` naming the field, e.g.
`compute.gpu_count` or `container.env.MY_VAR`.
"""

from __future__ import annotations

import base64
import binascii
import re
from decimal import Decimal

from rest_framework import serializers

from apps.catalog.models import Accelerator
from apps.core.money import MICROS_PER_USD, usd_to_micros
from apps.core.serializers import StrictSerializer
from apps.core.ssh_keys import InvalidPublicKey, parse_public_key
from apps.providers.backends.containers import image_reference_problem

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_PREFIX = "TRAINYARD_"
PLATFORM_OWNED = frozenset({"HF_ENDPOINT"})
MAX_DISK_GB = 4096
MAX_SCRIPT_BYTES = 1024 * 1024
# `container.files`: a few small text files written into the working directory (bigger code
# goes in an uploaded archive, `container.workdir`).
MAX_INLINE_FILES = 64
MAX_INLINE_FILES_BYTES = 256 * 1024
MAX_INLINE_PATH = 255
WORKDIR_ID = re.compile(r"^wd_[A-Za-z0-9]{1,40}$")
# The text of a job file kept with its job (`trainyard apply -f`): a description, not code.
MAX_JOB_FILE_BYTES = 64 * 1024
# The one default ephemeral disk per job kind, in GB, used by the New Job form, the fine-tune
# and serve payloads and (as constants that tests/cli keeps equal) the CLI: a container job's
# scratch space; a fine-tune and a serve job also hold the base model, checkpoints, adapters.
DEFAULT_DISK_GB: dict[str, int] = {"container": 10, "finetune": 20, "serve": 20}


class ComputeIn(StrictSerializer):
    accelerator = serializers.CharField(max_length=64)
    gpu_count = serializers.IntegerField(min_value=1, max_value=64)
    ephemeral_disk_gb = serializers.IntegerField(min_value=1, max_value=MAX_DISK_GB)

    def validate(self, attrs):
        accelerator = Accelerator.objects.filter(name=attrs["accelerator"]).first()
        if accelerator is None:
            raise serializers.ValidationError(
                {"accelerator": f"Unknown accelerator {attrs['accelerator']!r}; see the catalog."}
            )
        if attrs["gpu_count"] not in accelerator.gpu_counts:
            counts = ", ".join(str(c) for c in accelerator.gpu_counts)
            raise serializers.ValidationError(
                {"gpu_count": f"{accelerator.name} comes in gpu counts {counts}."}
            )
        return attrs


def _check_env_name(name: str) -> str | None:
    if not ENV_NAME.match(name):
        return "Not a valid environment variable name."
    if name.upper().startswith(RESERVED_PREFIX):
        return f"Names starting with {RESERVED_PREFIX} are reserved for the platform."
    if name in PLATFORM_OWNED:
        return f"{name} is set by the platform and cannot be overridden."
    return None


# The rule for a workload's variable names, for the requests of other apps that set some (a
# fine-tune's `secret_env`).
env_name_problem = _check_env_name


def _check_file_path(path: str) -> str | None:
    """Why `path` cannot name an inline file, or None: it must be relative, inside the
    working directory, and not name the directory itself."""
    if not path or len(path) > MAX_INLINE_PATH:
        return f"A path of 1 to {MAX_INLINE_PATH} characters is needed."
    if "\x00" in path or "\\" in path:
        return "The path holds a NUL byte or a backslash."
    if path.startswith("/"):
        return "Absolute paths are not allowed; give a path relative to the working directory."
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        return "'..' is not allowed; the file must stay inside the working directory."
    if not parts or path.endswith("/"):
        return "Not a file path."
    return None


class SecretRefIn(StrictSerializer):
    secret_id = serializers.CharField(max_length=32)
    key = serializers.CharField(max_length=255)


class ContainerIn(StrictSerializer):
    image = serializers.CharField(max_length=500)
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        allow_empty=False,
        required=False,
        allow_null=True,
        max_length=1000,
    )
    script_b64 = serializers.CharField(required=False, allow_null=True, trim_whitespace=False)
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )
    secret_env = serializers.DictField(child=SecretRefIn(), required=False, default=dict)
    workdir = serializers.CharField(
        required=False, allow_null=True, max_length=64, help_text="A `wd_…` archive id."
    )
    files = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
        help_text="Relative path → text, written into the working directory.",
    )

    def validate_image(self, value):
        # A transport (`docker-archive:/etc/hostname`) would have the worker open host paths.
        if problem := image_reference_problem(value):
            raise serializers.ValidationError(problem)
        return value

    def validate_workdir(self, value):
        if value is not None and not WORKDIR_ID.match(value):
            raise serializers.ValidationError("Not a workdir archive id (wd_…).")
        return value

    def validate_files(self, value):
        if len(value) > MAX_INLINE_FILES:
            raise serializers.ValidationError(f"At most {MAX_INLINE_FILES} files.")
        errors = {path: problem for path in value if (problem := _check_file_path(path))}
        if errors:
            raise serializers.ValidationError(errors)
        total = sum(len(path.encode()) + len(text.encode()) for path, text in value.items())
        if total > MAX_INLINE_FILES_BYTES:
            raise serializers.ValidationError(
                f"The files hold {total} bytes; at most {MAX_INLINE_FILES_BYTES} in all "
                "(ship more as an archive, container.workdir)."
            )
        return value

    def validate_script_b64(self, value):
        if value is None:
            return value
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise serializers.ValidationError("Not valid base64.") from exc
        if not decoded.strip():
            raise serializers.ValidationError("The script is empty.")
        if len(decoded) > MAX_SCRIPT_BYTES:
            raise serializers.ValidationError("The script is larger than 1 MiB.")
        return value

    def validate_env(self, value):
        errors = {name: problem for name in value if (problem := _check_env_name(name))}
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_secret_env(self, value):
        errors = {name: problem for name in value if (problem := _check_env_name(name))}
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate(self, attrs):
        has_command = attrs.get("command") is not None
        has_script = attrs.get("script_b64") is not None
        if has_command == has_script:
            raise serializers.ValidationError(
                {"command": "Give exactly one of command (an argv list) and script_b64."}
            )
        clash = sorted(set(attrs.get("env", {})) & set(attrs.get("secret_env", {})))
        if clash:
            raise serializers.ValidationError(
                {"secret_env": {clash[0]: "Also set in env; a variable comes from one place."}}
            )
        return attrs


class AccessIn(StrictSerializer):
    ssh_public_key = serializers.CharField(
        required=False, allow_null=True, max_length=16384, trim_whitespace=True
    )

    def validate_ssh_public_key(self, value):
        """An OpenSSH public key line the SSH gateway accepts: the rule of a member's
        registered keys (`apps.core.ssh_keys`). Stored as given, comment and all."""
        if value is None:
            return value
        try:
            parse_public_key(value)
        except InvalidPublicKey as exc:
            reason = str(exc)
            raise serializers.ValidationError(
                "Not an OpenSSH public key (expected e.g. 'ssh-ed25519 AAAA... you@host'): "
                f"{reason[0].lower()}{reason[1:]}"
            ) from exc
        return value


def _positive(value):
    if value is not None and value <= 0:
        raise serializers.ValidationError("Must be greater than zero.")
    return value


class LimitsIn(StrictSerializer):
    max_runtime_hours = serializers.FloatField(required=False, allow_null=True, max_value=24 * 365)
    max_cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, required=False, allow_null=True
    )
    max_price_usd_hr = serializers.DecimalField(
        max_digits=14, decimal_places=6, required=False, allow_null=True
    )

    validate_max_runtime_hours = staticmethod(_positive)
    validate_max_cost_usd = staticmethod(_positive)
    validate_max_price_usd_hr = staticmethod(_positive)


class JobFileIn(StrictSerializer):
    """The job file a request was made from (`trainyard apply -f job.yaml` sends it), kept
    with the job and shown on its page. It is not read: the body beside it is the request."""

    name = serializers.CharField(max_length=255)
    content = serializers.CharField(allow_blank=True, trim_whitespace=False)

    def validate_content(self, value):
        if len(value.encode()) > MAX_JOB_FILE_BYTES:
            raise serializers.ValidationError(
                f"The job file is larger than {MAX_JOB_FILE_BYTES // 1024} KiB."
            )
        return value


class JobCreateIn(StrictSerializer):
    name = serializers.CharField(max_length=200)
    project = serializers.CharField(max_length=32, required=False, allow_null=True)
    priority_class = serializers.ChoiceField(
        choices=["standard", "preemptible"], required=False, default="standard"
    )
    compute = ComputeIn()
    container = ContainerIn()
    access = AccessIn(required=False)
    limits = LimitsIn(required=False)
    job_file = JobFileIn(required=False, allow_null=True)


def normalise(validated: dict) -> dict:
    """The stored spec: every field present, money as micro-dollars, secret references
    only (their values are resolved when the runner fetches its spec)."""
    container = validated["container"]
    limits = validated.get("limits") or {}
    access = validated.get("access") or {}
    return {
        "name": validated["name"],
        "priority_class": validated["priority_class"],
        "compute": dict(validated["compute"]),
        "container": {
            "image": container["image"],
            "command": container.get("command"),
            "script_b64": container.get("script_b64"),
            "env": dict(container.get("env") or {}),
            "secret_env": {
                name: dict(ref) for name, ref in (container.get("secret_env") or {}).items()
            },
            "workdir": container.get("workdir"),
            "files": dict(container.get("files") or {}),
        },
        "access": {"ssh_public_key": access.get("ssh_public_key")},
        "limits": {
            "max_runtime_hours": limits.get("max_runtime_hours"),
            "max_cost_micros": usd_to_micros(limits.get("max_cost_usd")),
            "max_price_micros_hr": usd_to_micros(limits.get("max_price_usd_hr")),
        },
    }


def request_from_spec(spec: dict, *, project_id: str) -> dict:
    """The request body (as `POST /compute/jobs` takes it) that `normalise` turns into
    `spec`: what a re-run starts from. Money goes back to dollars as exact decimal strings;
    empty optional parts are left out, as a caller would leave them."""
    container = {"workdir": None, "files": {}, **spec["container"]}
    body_container = {"image": container["image"]}
    for field in ("command", "script_b64", "workdir"):
        if container.get(field) is not None:
            body_container[field] = container[field]
    for field in ("env", "secret_env", "files"):
        if container.get(field):
            body_container[field] = container[field]
    limits = spec.get("limits") or {}
    body_limits = {
        "max_runtime_hours": limits.get("max_runtime_hours"),
        "max_cost_usd": _usd_text(limits.get("max_cost_micros")),
        "max_price_usd_hr": _usd_text(limits.get("max_price_micros_hr")),
    }
    body = {
        "name": spec["name"],
        "project": project_id,
        "priority_class": spec["priority_class"],
        "compute": dict(spec["compute"]),
        "container": body_container,
    }
    if ssh_key := (spec.get("access") or {}).get("ssh_public_key"):
        body["access"] = {"ssh_public_key": ssh_key}
    if any(value is not None for value in body_limits.values()):
        body["limits"] = {k: v for k, v in body_limits.items() if v is not None}
    return body


def _usd_text(micros: int | None) -> str | None:
    return None if micros is None else str(Decimal(micros) / MICROS_PER_USD)


def deep_merge(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` laid over it: objects merge key by key, anything else (a
    list, a number, null) replaces what was there. Neither argument is changed."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
