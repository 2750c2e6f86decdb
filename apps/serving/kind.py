"""The serve job kind's hooks (`apps.jobs.kinds`): what the generic core asks of it.

- The engine's secret reaches the runner with its spec, never the job's stored spec: it is
  derived from the attempt (`engine_secret`), so it dies with the attempt and the control
  plane needs to store nothing to call the engine.
- Its minutes are billed as a `service` (usage names the endpoint, or the Playground).
- When the engine announces its port, the endpoint (or Playground server) it runs for is
  synced: its revisions are loaded and the first one goes live; an endpoint's open page is
  pushed at once (its serve job runs).
"""

from __future__ import annotations

from django.utils.crypto import salted_hmac

from apps.jobs.kinds import JobKind
from apps.jobs.models import Attempt, Job
from apps.serving import enqueue, live, payloads
from apps.serving.models import Endpoint
from runner import protocol

HOST_PATH_PREFIXES = ("/", "./", "../", "~")
SECRET_SALT = "apps.serving.engine-secret"


def engine_secret(attempt: Attempt) -> str:
    """The secret the attempt's engine requires on every call (an HMAC of the attempt's
    unique token nonce under SECRET_KEY)."""
    return salted_hmac(SECRET_SALT, attempt.token_nonce, algorithm="sha256").hexdigest()


class Serve(JobKind):
    serves = True

    def runner_inputs(self, job: Job) -> tuple[list, dict[str, str]]:
        attempt = Attempt.objects.get(job=job, number=job.attempt_count)
        return [], {protocol.ENV_SERVE_SECRET: engine_secret(attempt)}

    def host_paths(self, job: Job) -> list[str]:
        """A base model given as a path on the host: only single-tenant providers run it."""
        base = payloads.base_model_of(job)
        return [base] if base and base.strip().startswith(HOST_PATH_PREFIXES) else []

    def usage_resource(self, job: Job) -> tuple[str, str, str]:
        serves_for = payloads.serves_for(job)
        if serves_for.startswith("endpoint:"):
            return "service", serves_for.removeprefix("endpoint:"), job.name
        return "service", payloads.PLAYGROUND, job.name

    def service_ready(self, job: Job, attempt: int, port: int) -> None:
        serves_for = payloads.serves_for(job)
        if serves_for.startswith("endpoint:"):
            # The endpoint page's Serve job badge says Running from now on; its status stays
            # `starting` until the sync has the revision loaded (and pushes again).
            for endpoint_id in Endpoint.objects.filter(job_id=job.pk).values_list("pk", flat=True):
                live.endpoint_changed(endpoint_id)
            enqueue.sync_endpoint(job.pk)
        elif serves_for == payloads.PLAYGROUND:
            enqueue.playground_server_ready(job.pk)
