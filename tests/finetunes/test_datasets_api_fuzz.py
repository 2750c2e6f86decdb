"""Whatever a client sends to a real project's dataset upload, the answer is the API's error
shape or a dataset, never a 500 (the schema fuzz in tests/api mostly meets unknown project
ids, so this drives the upload paths themselves)."""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.formats import FORMATS

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
ANSWERS = {201, 400, 413, 415}
formats = st.one_of(st.sampled_from(list(FORMATS)), st.text(max_size=20))
names = st.one_of(st.none(), st.text(max_size=250))
filenames = st.one_of(
    st.none(),
    st.text(max_size=300),
    st.builds(
        lambda stem, suffix: stem + suffix,
        st.text(max_size=40),
        st.sampled_from([".jsonl", ".csv"]),
    ),
)
bodies = st.one_of(
    st.binary(max_size=2000),
    st.lists(
        st.dictionaries(
            st.sampled_from(["instruction", "input", "output", "text", "messages", "prompt"]),
            st.one_of(st.text(max_size=30), st.integers(), st.none(), st.lists(st.text())),
        ),
        max_size=5,
    ).map(lambda rows: "\n".join(json.dumps(row) for row in rows).encode()),
)


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.DATASET_MAX_BYTES = 1500


def _answered(response) -> None:
    assert response.status_code in ANSWERS, response.content[:500]
    body = response.json()
    assert ("id" in body) if response.status_code == 201 else set(body) == {"error"}


def test_raw_bodies(api_client_for, org, project):
    api = api_client_for(org)
    url = f"/api/v1/projects/{project.public_id}/datasets"

    @FUZZ
    @given(
        body=bodies,
        content_type=st.sampled_from(
            ["application/x-ndjson", "text/csv", "application/octet-stream", "text/plain"]
        ),
        fmt=formats,
        name=names,
        filename=filenames,
    )
    def check(body, content_type, fmt, name, filename):
        query = {"format": fmt, "name": name, "filename": filename}
        query = {key: value for key, value in query.items() if value is not None}
        response = api.generic(
            "POST",
            url + "?" + urlencode(query),
            body,
            content_type=content_type,
        )
        _answered(response)

    check()


# Names Django's test client can attach: it refuses, before sending, one whose last part is
# empty, "." or ".." (SuspiciousFileOperation in the test, not an answer of the server).
sendable_filenames = st.text(min_size=1, max_size=300).filter(
    lambda name: os.path.basename(name) not in ("", ".", "..")
)


def test_multipart_bodies(api_client_for, org, project):
    api = api_client_for(org)
    url = f"/api/v1/projects/{project.public_id}/datasets"

    @FUZZ
    @given(body=bodies, fmt=formats, name=names, filename=sendable_filenames)
    def check(body, fmt, name, filename):
        data = {"format": fmt, "file": SimpleUploadedFile(filename, body)}
        if name is not None:
            data["name"] = name
        _answered(api.post(url, data, format="multipart"))

    check()
