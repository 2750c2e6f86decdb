"""STORAGE_BACKEND and the S3_* variables: where datasets and artifacts are stored, chosen by
the environment alone, with the secret key never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.storage import default_storage_config

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3-secret-that-must-never-be-shown-0123456789"
BASE_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "a6Jq0v!x9r@L2m#Tz8wE$u4bN7pK^c1sY5dF&h3gR*eW0oQiZ-yUtVnMjXlBkCaS",
    "SECRETS_KEYS": "cHJvZC10ZXN0LWZlcm5ldC1rZXktMDEyMzQ1Njc4OTA=",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/trainyard",
}
# Stores a file through default_storage and says which backend took it; and prints what
# Django's error pages would show of the settings (their filter hides secrets).
PROBE = """
import json
import django
django.setup()
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.views.debug import SafeExceptionReporterFilter
name = default_storage.save("probe/hello.txt", ContentFile(b"hello from settings"))
safe = SafeExceptionReporterFilter().get_safe_settings()
print(json.dumps({
    "backend": type(default_storage._wrapped).__name__,
    "name": name,
    "error_page_settings": repr(safe),
}))
"""


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `code` in a fresh process on `config.settings` with `env`, as the web server,
    worker and beat start (they import settings at startup)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "SECURE_", "S3_", "AWS_")) and k != "STORAGE_BACKEND"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **BASE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_filesystem_is_the_default():
    assert settings.STORAGE_BACKEND == "filesystem"
    assert settings.STORAGES["default"] == {
        "BACKEND": "django.core.files.storage.FileSystemStorage"
    }


def test_storage_backend_s3_stores_through_the_bucket_and_never_shows_the_secret(
    s3_endpoint, tmp_path
):
    bucket = f"trainyard-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key=SECRET,
    )
    client.create_bucket(Bucket=bucket)

    result = _python(
        PROBE,
        {
            "STORAGE_BACKEND": "s3",
            "S3_BUCKET": bucket,
            "S3_ENDPOINT_URL": s3_endpoint,
            "S3_REGION": "us-east-1",
            "S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "S3_SECRET_ACCESS_KEY": SECRET,
            "MEDIA_ROOT": str(tmp_path / "media"),
        },
    )

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["backend"], shown["name"]) == ("S3Storage", "probe/hello.txt")
    stored = client.get_object(Bucket=bucket, Key="probe/hello.txt")["Body"].read()
    assert stored == b"hello from settings"
    assert not (tmp_path / "media").exists()
    assert SECRET not in result.stdout + result.stderr
    assert "S3_SECRET_ACCESS_KEY': '********************'" in shown["error_page_settings"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STORAGE_BACKEND": "s3", "S3_SECRET_ACCESS_KEY": SECRET}, "needs S3_BUCKET"),
        (
            {"STORAGE_BACKEND": "s3", "S3_BUCKET": "b", "S3_SECRET_ACCESS_KEY": SECRET},
            "Set both S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY, or neither",
        ),
        (
            {"STORAGE_BACKEND": "gcs", "S3_SECRET_ACCESS_KEY": SECRET},
            "STORAGE_BACKEND must be one of filesystem, s3, not 'gcs'",
        ),
    ],
)
def test_an_unusable_storage_setting_refuses_to_start_and_says_why(env, message):
    result = _python("import django; django.setup(); print('started')", env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "started" not in result.stdout
    assert SECRET not in result.stdout + result.stderr


def test_an_s3_compatible_endpoint_is_addressed_path_style():
    config = default_storage_config(
        "S3", bucket="ckpts", endpoint_url="http://minio:9000", region="eu-central-1"
    )
    assert config == {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": "ckpts",
            "file_overwrite": False,
            "default_acl": None,
            "querystring_auth": True,
            "endpoint_url": "http://minio:9000",
            "addressing_style": "path",
            "region_name": "eu-central-1",
        },
    }


def test_without_keys_boto3s_own_credential_chain_is_used():
    options = default_storage_config("s3", bucket="ckpts")["OPTIONS"]
    assert "access_key" not in options and "secret_key" not in options
    assert "endpoint_url" not in options and "addressing_style" not in options
    with pytest.raises(ImproperlyConfigured):
        default_storage_config("s3", bucket="ckpts", access_key_id="AKID")
