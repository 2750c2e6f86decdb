"""Where uploaded datasets and artifacts live: `STORAGES["default"]` built from the
environment (`STORAGE_BACKEND` and the `S3_*` variables, see `.env.example`).

- `filesystem` (the default): Django's FileSystemStorage under MEDIA_ROOT.
- `s3`: django-storages' S3Storage on any S3-compatible store (AWS S3, MinIO, Ceph, ...).
  `S3_BUCKET` is required. `S3_ENDPOINT_URL` points at a store other than AWS; then
  path-style addressing is used (`http://host:9000/bucket/key`), which such stores serve
  without wildcard DNS. Without `S3_ACCESS_KEY_ID`/`S3_SECRET_ACCESS_KEY` boto3's own chain
  (instance role, `~/.aws`, `AWS_*` variables) provides the credentials.

Objects are never overwritten (`file_overwrite` off): a second file under a taken name gets
a free name beside it, as on the filesystem, which `apps.jobs.artifacts.store` relies on. Nothing
here ever puts the secret key into a message.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

BACKENDS = ("filesystem", "s3")


def default_storage_config(
    backend: str,
    *,
    bucket: str = "",
    endpoint_url: str = "",
    region: str = "",
    access_key_id: str = "",
    secret_access_key: str = "",
) -> dict:
    """The `STORAGES["default"]` entry for `backend`; ImproperlyConfigured when unusable."""
    backend = backend.strip().lower()
    if backend == "filesystem":
        return {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    if backend != "s3":
        raise ImproperlyConfigured(
            f"STORAGE_BACKEND must be one of {', '.join(BACKENDS)}, not {backend!r}."
        )
    if not bucket:
        raise ImproperlyConfigured("STORAGE_BACKEND=s3 needs S3_BUCKET.")
    if bool(access_key_id) != bool(secret_access_key):
        raise ImproperlyConfigured(
            "Set both S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY, or neither (boto3's chain)."
        )
    options: dict = {
        "bucket_name": bucket,
        "file_overwrite": False,
        "default_acl": None,  # the bucket's own policy decides; nothing is made public
        "querystring_auth": True,
    }
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
        options["addressing_style"] = "path"
    if region:
        options["region_name"] = region
    if access_key_id:
        options["access_key"] = access_key_id
        options["secret_key"] = secret_access_key
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}
