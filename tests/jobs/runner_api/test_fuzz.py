"""Fuzz the runner API with a valid token: whatever a runner (or a workload that stole its
token) sends, the answer is never a server error. Hypothesis drives the real views on the
real database."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=16,
)
log_line = st.fixed_dictionaries(
    {
        "seq": st.integers(min_value=-5, max_value=2**40) | json_values,
        "ts": st.sampled_from(["2026-12-01T00:00:00Z", "yesterday", ""]) | json_values,
        "source": st.sampled_from(["user", "system", "root"]) | json_values,
        "stream": st.sampled_from(["stdout", "stderr", "tty"]) | json_values,
        "message": st.text(max_size=200)
        | st.sampled_from(
            [
                '{"type": "metrics", "step": 1, "loss": NaN}',
                '{"type": "metrics", "loss": 1, "k\\u0000": 2}',
                '{"type": "grading", "passed": true, "score": [NaN, {"x": Infinity}]}',
                "{'loss': 1e400, 'step': 99999999999999}",
                "iter 2147483648: loss 1.0",
            ]
        ),
    }
)
bodies = (
    json_values
    | st.fixed_dictionaries({"lines": st.lists(log_line, max_size=5)})
    | st.fixed_dictionaries({"exit_code": json_values})
    | st.fixed_dictionaries({"resumed_from_step": json_values})
)


@pytest.fixture
def runner(org):
    job = make_job(org, container={"image": "img", "command": ["true"]})
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    client.base = f"/api/v1/runner/jobs/{Job.objects.get(pk=job.pk).public_id}/"
    return client


@pytest.mark.parametrize("endpoint", ["started", "heartbeat", "logs", "exit"])
def test_no_posted_body_is_a_server_error(runner, endpoint):
    @FUZZ
    @given(body=bodies)
    def no_server_error(body):
        raw = json.dumps(body)  # NaN and Infinity as Python writes them
        response = runner.post(runner.base + endpoint, raw, content_type="application/json")
        assert response.status_code < 500, (endpoint, raw[:300], response.content[:300])

    no_server_error()


def test_no_artifact_query_or_id_is_a_server_error(runner):
    @FUZZ
    @given(
        kind=st.text(max_size=12) | st.sampled_from(["checkpoint", "adapter"]),
        step=st.text(max_size=12) | st.integers(min_value=-5, max_value=2**70).map(str),
        sha=st.text(max_size=70),
        artifact=st.text(min_size=1, max_size=12).filter(lambda s: "/" not in s),
    )
    def no_server_error(kind, step, sha, artifact):
        upload = runner.post(
            runner.base + "artifacts",
            b"not really a tarball",
            content_type="application/gzip",
            query_params={"kind": kind, "step": step},
            HTTP_X_TRAINYARD_SHA256=sha.encode("ascii", "replace").decode(),
        )
        download = runner.get(runner.base + f"artifacts/{artifact}/download")
        assert upload.status_code < 500, (kind, step, upload.content[:300])
        assert download.status_code < 500, (artifact, download.content[:300])

    no_server_error()
