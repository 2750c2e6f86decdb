"""The endpoint pages: the organization's endpoints, one endpoint's state, revisions,
promotions, usage and snippets; Swap, Rollback and Stop as POST forms that viewers may not
use; never another organization's endpoint; and the page's websocket, which pushes the
status and tables after a revision flips.

Endpoints are built with the ORM here (a `serve` job that "runs" with both revisions loaded
on its attempt), never with `endpoint_create`, which would start a real serve job."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone

from apps.accounts import services as account_services
from apps.core.live import watched
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from apps.serving import services
from apps.serving.live import endpoint_group
from apps.serving.models import Endpoint, EndpointRequest, EndpointRevision, Promotion
from tests.serving.fixtures import succeeded_finetune_job
from tests.sockets import SOCKET_TEST, socket_counts_reset, websocket

BASE = "tiny/llama-base"


@dataclass
class Served:
    endpoint: Endpoint
    finetune: Job
    adapter: Artifact
    checkpoint: Artifact
    r1: EndpointRevision
    r2: EndpointRevision

    @property
    def url(self) -> str:
        return f"/o/{self.endpoint.organization.slug}/endpoints/{self.endpoint.public_id}/"


def finetune(project, *, name: str = "tuned-a", model: str = BASE) -> Job:
    """A succeeded fine-tune of `project` on `model` with a checkpoint at step 2 and a final
    adapter (rows only: nothing here reads their files)."""
    config = {"model": model, "dataset": "demo", "dataset_format": "alpaca", "max_steps": 4}
    job = succeeded_finetune_job(project, name=name, config=config)
    for kind, step in ((Artifact.Kind.CHECKPOINT, 2), (Artifact.Kind.ADAPTER, None)):
        Artifact.objects.create(
            job=job,
            kind=kind,
            step=step,
            sha256="0" * 64,
            storage_path=f"artifacts/{job.public_id}/attempt-1/{kind}-{step or 'final'}.tar.gz",
        )
    return job


def served_endpoint(project, *, name: str = "support-bot", user=None) -> Served:
    """A ready endpoint of `project`: its serve job runs (attempt 1), r1 (the checkpoint)
    and r2 (the final adapter) are both ready and loaded there, r2 is current and r1
    previous, so a rollback is allowed."""
    tuned = finetune(project)
    checkpoint = tuned.artifacts.get(kind=Artifact.Kind.CHECKPOINT)
    adapter = tuned.artifacts.get(kind=Artifact.Kind.ADAPTER)
    serve = Job.objects.create(
        organization=project.organization,
        project=project,
        name=f"endpoint {name}",
        kind=Job.Kind.SERVE,
        spec={},
        accelerator="cpu",
        gpu_count=1,
        ephemeral_disk_gb=20,
        state=JobState.RUNNING,
        attempt_count=1,
        accrued_micros=1_234_567,
        started_at=timezone.now(),
    )
    endpoint = Endpoint.objects.create(
        organization=project.organization,
        project=project,
        name=name,
        base_model=BASE,
        job=serve,
        state=Endpoint.State.READY,
        revision_count=2,
        created_by=user,
    )
    now = timezone.now()
    r1, r2 = (
        EndpointRevision.objects.create(
            endpoint=endpoint,
            number=number,
            artifact=artifact,
            served_name=f"{name}-r{number}",
            state=EndpointRevision.State.READY,
            loaded_on_attempt=1,
            created_by=user,
            ready_at=now,
        )
        for number, artifact in ((1, checkpoint), (2, adapter))
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(current_revision=r2, previous_revision=r1)
    Promotion.objects.create(endpoint=endpoint, revision=r1, kind="first", by_user=user, at=now)
    Promotion.objects.create(
        endpoint=endpoint, revision=r2, replaced=r1, kind="swap", by_user=user, at=now
    )
    endpoint.refresh_from_db()
    return Served(endpoint, tuned, adapter, checkpoint, r1, r2)


def pointers(endpoint: Endpoint) -> tuple[int | None, int | None, str, int, int]:
    """What a write may change: current and previous revision numbers, the stored state,
    and how many revisions and promotions there are."""
    endpoint.refresh_from_db()
    return (
        endpoint.current_revision.number if endpoint.current_revision else None,
        endpoint.previous_revision.number if endpoint.previous_revision else None,
        endpoint.state,
        endpoint.revisions.count(),
        endpoint.promotions.count(),
    )


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def flashed(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


# -- the list ------------------------------------------------------------------------------


@pytest.mark.django_db
class TestList:
    def test_it_lists_the_organizations_endpoints_with_state_revision_and_cost(
        self, client_for, member, project
    ):
        served = served_endpoint(project)

        body = page(client_for(member), "/o/acme/endpoints/")

        row = re.search(rf'<tr id="endpoint-{served.endpoint.public_id}".*?</tr>', body, re.S)
        row = row.group(0)
        assert 'data-state="ready"' in row
        assert f'href="{served.url}"><strong>support-bot</strong>' in row
        assert ">Vision</a>" in row
        assert '<strong class="revision-label">r2</strong>' in row
        assert "final adapter of" in row
        assert f'href="/o/acme/jobs/{served.finetune.public_id}/">tuned-a</a>' in row
        assert f"<code>{BASE}</code>" in row
        assert '<span class="money" title="$1.234567">$1.23</span>' in row

    def test_the_state_shown_is_the_endpoints_not_the_stored_one(self, client_for, member, project):
        served = served_endpoint(project)
        Job.objects.filter(pk=served.endpoint.job_id).update(state=JobState.FAILED)

        body = page(client_for(member), "/o/acme/endpoints/")

        assert 'data-state="failed"' in body
        assert 'class="badge state-failed">failed<' in body

    def test_without_endpoints_it_says_how_to_deploy_one(
        self, client_for, member, project, settings
    ):
        settings.TRAINYARD_PUBLIC_URL = "https://trainyard.example.com"
        body = html.unescape(page(client_for(member), "/o/acme/endpoints/"))

        assert "No endpoints yet" in body
        assert "Deploy as endpoint" in body
        assert "curl https://trainyard.example.com/api/v1/endpoints" in body
        assert "Authorization: Bearer $TRAINYARD_API_KEY" in body
        assert '"target": {"job": "job_…"}' in body

    def test_the_navigation_has_an_endpoints_tab(self, client_for, member, org):
        body = page(client_for(member), "/o/acme/projects/")
        assert '<a href="/o/acme/endpoints/">Endpoints</a>' in body

    def test_another_organizations_endpoints_never_show(
        self, client_for, member, outsider, project, other_project
    ):
        ours = served_endpoint(project, name="ours")
        theirs = served_endpoint(other_project, name="theirs")

        mine = page(client_for(member), "/o/acme/endpoints/")
        assert ours.endpoint.public_id in mine
        assert theirs.endpoint.public_id not in mine and "theirs" not in mine

        other = page(client_for(outsider), "/o/globex/endpoints/")
        assert theirs.endpoint.public_id in other
        assert ours.endpoint.public_id not in other
        assert client_for(outsider).get("/o/acme/endpoints/").status_code == 404

    def test_anonymous_is_sent_to_sign_in(self, client, project):
        served = served_endpoint(project)
        for path in ("/o/acme/endpoints/", served.url):
            response = client.get(path)
            assert response.status_code == 302
            assert response["Location"].startswith("/accounts/login/")


# -- the detail page -----------------------------------------------------------------------


@pytest.mark.django_db
class TestDetail:
    def test_a_member_sees_state_current_revision_revisions_and_promotions(
        self, client_for, member, project
    ):
        served = served_endpoint(project, user=member)

        body = page(client_for(member), served.url)

        status = re.search(r'<section id="endpoint-status".*?</section>', body, re.S).group(0)
        assert 'data-state="ready"' in status and 'data-current="r2"' in status
        assert 'data-rollback="true"' in status and "hx-swap-oob" not in status
        assert '<span id="endpoint-state" class="badge state-ready">ready</span>' in status
        assert '<strong id="current-revision">r2</strong>' in status
        assert "<code>support-bot-r2</code>" in status
        assert f"art_{served.adapter.pk}" in status
        assert f'href="/o/acme/jobs/{served.endpoint.job.public_id}/"' in status
        assert f'ws-connect="/ws/endpoints/{served.endpoint.public_id}/"' in body

        revisions = re.search(r'<div id="endpoint-revisions">.*?</div>', body, re.S).group(0)
        assert re.findall(r'<tr id="revision-(\d+)"', revisions) == ["2", "1"]
        assert "checkpoint step 2 of" in revisions and "final adapter of" in revisions
        assert revisions.count(f"<td>{member.username}</td>") == 2

        promotions = re.search(r'<div id="endpoint-promotions">.*?</div>', body, re.S).group(0)
        assert re.findall(r'data-kind="(\w+)"', promotions) == ["swap", "first"]
        assert "<td><strong>r2</strong></td>\n            <td>r1</td>" in promotions
        assert '<span class="money" title="$1.234567">$1.23</span>' in body

    def test_a_failed_revision_shows_its_error(self, client_for, member, project):
        served = served_endpoint(project)
        EndpointRevision.objects.create(
            endpoint=served.endpoint,
            number=3,
            artifact=served.adapter,
            served_name="support-bot-r3",
            state=EndpointRevision.State.FAILED,
            error_message="The engine refused it: bad adapter",
        )

        body = page(client_for(member), served.url)

        row = re.search(r'<tr id="revision-3".*?</tr>', body, re.S).group(0)
        assert 'data-state="failed"' in row
        assert '<span class="error">The engine refused it: bad adapter</span>' in row

    def test_the_swap_form_offers_the_orgs_fine_tunes_on_the_same_base_model(
        self, client_for, member, project, other_project
    ):
        served = served_endpoint(project)
        other_base = finetune(project, name="other-base", model="another/model")
        theirs = finetune(other_project, name="theirs")

        body = page(client_for(member), served.url)

        form = re.search(r'<form id="swap-form".*?</form>', body, re.S).group(0)
        assert 'name="csrfmiddlewaretoken"' in form
        offered = re.findall(r'<option value="(art_\d+)">([^<]*)</option>', form)
        assert offered == [
            (f"art_{served.adapter.pk}", "tuned-a · final adapter (current)"),
            (f"art_{served.checkpoint.pk}", "tuned-a · checkpoint step 2"),
        ]
        for job in (other_base, theirs):
            for artifact in job.artifacts.all():
                assert f'"art_{artifact.pk}"' not in form
        assert 'id="rollback-form"' in body and 'id="stop-form"' in body
        rollback = re.search(r'<form id="rollback-form"[^>]*>', body, re.S).group(0)
        assert "hidden" not in rollback

    def test_rollback_is_hidden_without_a_previous_revision(self, client_for, member, project):
        served = served_endpoint(project)
        Endpoint.objects.filter(pk=served.endpoint.pk).update(previous_revision=None)

        body = page(client_for(member), served.url)

        assert 'data-rollback="false"' in body
        rollback = re.search(r'<form id="rollback-form"[^>]*>', body, re.S).group(0)
        assert rollback.rstrip(">").endswith("hidden")

    def test_a_viewer_sees_the_page_but_no_write_buttons(self, client_for, viewer, project):
        served = served_endpoint(project)

        body = page(client_for(viewer), served.url)

        assert '<strong id="current-revision">r2</strong>' in body
        for control in ("endpoint-controls", "swap-form", "rollback-form", "stop-form"):
            assert f'id="{control}"' not in body
        assert "/swap/" not in body and "/rollback/" not in body and "/stop/" not in body

    def test_a_stopped_endpoint_has_no_controls(self, client_for, member, project):
        served = served_endpoint(project)
        Endpoint.objects.filter(pk=served.endpoint.pk).update(state=Endpoint.State.STOPPED)

        body = page(client_for(member), served.url)

        assert 'data-state="stopped"' in body
        assert 'id="endpoint-controls"' not in body

    def test_another_organizations_endpoint_is_a_404(
        self, client_for, member, outsider, project, other_project
    ):
        ours = served_endpoint(project, name="ours")
        theirs = served_endpoint(other_project, name="theirs")
        client = client_for(outsider)

        assert client.get(ours.url).status_code == 404
        # Their own organization in the path does not find our endpoint either.
        assert client.get(f"/o/globex/endpoints/{ours.endpoint.public_id}/").status_code == 404
        assert client_for(member).get(theirs.url).status_code == 404
        assert client_for(member).get("/o/acme/endpoints/ep_nope/").status_code == 404
        for action in ("swap", "rollback", "stop"):
            response = client.post(f"{ours.url}{action}/", {"target": f"art_{ours.adapter.pk}"})
            assert response.status_code == 404
        assert pointers(ours.endpoint) == (2, 1, "ready", 2, 2)

    def test_snippets_name_the_endpoint_and_never_a_key(
        self, client_for, member, org, project, settings
    ):
        settings.TRAINYARD_PUBLIC_URL = "https://trainyard.example.com/"
        served = served_endpoint(project)
        key, full_key = account_services.api_key_create(organization=org, name="prod")
        EndpointRequest.objects.create(
            endpoint=served.endpoint,
            organization=org,
            api_key=key,
            path="/v1/chat/completions",
            status_code=200,
            latency_ms=120,
        )

        raw = page(client_for(member), served.url)
        body = html.unescape(raw)

        curl = html.unescape(
            re.search(r'<pre id="snippet-curl"[^>]*>(.*?)</pre>', raw, re.S).group(1)
        )
        assert "curl https://trainyard.example.com/v1/chat/completions" in curl
        assert '-H "Authorization: Bearer $TRAINYARD_API_KEY"' in curl
        assert '"model": "support-bot"' in curl
        python = html.unescape(
            re.search(r'<pre id="snippet-python"[^>]*>(.*?)</pre>', raw, re.S).group(1)
        )
        assert "from openai import OpenAI" in python
        assert 'base_url="https://trainyard.example.com/v1"' in python
        assert 'model="support-bot"' in python
        assert 'os.environ["TRAINYARD_API_KEY"]' in python
        assert full_key not in body
        assert full_key.removeprefix(key.prefix) not in body
        assert f"<code>{key.prefix}…</code>" in raw  # the usage table names it by prefix

    def test_without_a_public_url_the_snippets_use_the_requests_host(
        self, client_for, member, project, settings
    ):
        settings.TRAINYARD_PUBLIC_URL = ""
        served = served_endpoint(project)

        body = html.unescape(page(client_for(member), served.url))

        assert "curl http://testserver/v1/chat/completions" in body
        assert 'base_url="http://testserver/v1"' in body

    def test_usage_shows_requests_and_latency_per_day_and_a_row_per_key(
        self, client_for, member, org, project
    ):
        served = served_endpoint(project)
        key, _ = account_services.api_key_create(organization=org, name="prod")
        now = timezone.now()
        for latency, api_key, status_code in (
            (100, key, 200),
            (300, key, 500),
            (200, None, 200),
        ):
            EndpointRequest.objects.create(
                endpoint=served.endpoint,
                organization=org,
                api_key=api_key,
                path="/v1/chat/completions",
                status_code=status_code,
                latency_ms=latency,
                prompt_tokens=10,
                completion_tokens=5,
                started_at=now,
            )
        EndpointRequest.objects.create(  # older than 30 days: not shown
            endpoint=served.endpoint,
            organization=org,
            path="/v1/chat/completions",
            status_code=200,
            latency_ms=9_999,
            started_at=now - timedelta(days=40),
        )

        body = page(client_for(member), served.url)

        data = json.loads(
            re.search(
                r'<script id="usage-data" type="application/json">(.*?)</script>', body
            ).group(1)
        )
        assert len(data["x"]) == 30
        assert data["requests"][-1] == 3 and sum(data["requests"]) == 3
        assert data["p50"][-1] == 200 and data["p95"][-1] == 300
        assert data["p50"][0] is None
        table = re.search(
            r'<table class="table compact" id="usage-table"[^>]*>.*?</table>', body, re.S
        )
        tbody = re.search(r"<tbody>(.*?)</tbody>", table.group(0), re.S).group(1)
        rows = re.findall(r"<tr>(.*?)</tr>", tbody, re.S)
        assert len(rows) == 2
        cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
        keyed = next(c for c in cells if key.prefix in c[1])
        assert keyed[2:] == ["2", "1", "20", "10", "100", "300"]
        dashboard = next(c for c in cells if "dashboard" in c[1])
        assert dashboard[2:] == ["1", "0", "10", "5", "200", "200"]

    def test_without_requests_usage_says_so(self, client_for, member, project):
        body = page(client_for(member), served_endpoint(project).url)
        assert "No requests in the last 30 days." in body
        assert 'id="usage-data"' not in body


# -- the writes ----------------------------------------------------------------------------


@pytest.mark.django_db
class TestWrites:
    def test_rollback_flips_current_and_previous(self, client_for, member, project):
        served = served_endpoint(project)

        response = client_for(member).post(f"{served.url}rollback/", follow=True)

        assert response.redirect_chain == [(served.url, 302)]
        assert flashed(response) == ["Rolled back: r1 answers now."]
        assert pointers(served.endpoint) == (1, 2, "ready", 2, 3)
        promotion = served.endpoint.promotions.first()
        assert (promotion.kind, promotion.revision_id, promotion.replaced_id) == (
            "rollback",
            served.r1.pk,
            served.r2.pk,
        )
        assert promotion.by_user == member
        assert '<strong id="current-revision">r1</strong>' in response.content.decode()

    def test_a_refused_rollback_is_a_message_not_an_error_page(self, client_for, member, project):
        served = served_endpoint(project)
        EndpointRevision.objects.filter(pk=served.r1.pk).update(loaded_on_attempt=None)

        response = client_for(member).post(f"{served.url}rollback/", follow=True)

        assert response.status_code == 200
        assert flashed(response) == [
            "The endpoint has no previous revision loaded to roll back to."
        ]
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)

    def test_swap_adds_a_loading_revision_of_the_chosen_artifact(self, client_for, member, project):
        served = served_endpoint(project)

        response = client_for(member).post(
            f"{served.url}swap/", {"target": f"art_{served.checkpoint.pk}"}, follow=True
        )

        assert flashed(response) == [
            "Revision r3 is loading; it goes live once loaded and smoke-tested."
        ]
        assert pointers(served.endpoint) == (2, 1, "ready", 3, 2)
        r3 = served.endpoint.revisions.get(number=3)
        assert (r3.state, r3.artifact_id, r3.served_name, r3.created_by) == (
            "loading",
            served.checkpoint.pk,
            "support-bot-r3",
            member,
        )
        assert re.search(r'<tr id="revision-3" data-state="loading">', response.content.decode())

    @pytest.mark.parametrize(
        "target, message",
        [
            ("", "Choose an adapter or checkpoint to serve."),
            ("not-an-id", "An artifact id is art_ and a whole number."),
            ("art_999999999", "No such artifact."),
        ],
    )
    def test_a_bad_swap_target_is_a_message(self, client_for, member, project, target, message):
        served = served_endpoint(project)

        response = client_for(member).post(f"{served.url}swap/", {"target": target}, follow=True)

        assert response.status_code == 200
        assert flashed(response) == [message]
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)

    def test_swap_refuses_another_orgs_artifact_and_another_base_model(
        self, client_for, member, project, other_project
    ):
        served = served_endpoint(project)
        theirs = finetune(other_project).artifacts.get(kind=Artifact.Kind.ADAPTER)
        other_base = finetune(project, name="b", model="another/model").artifacts.first()
        client = client_for(member)

        refused = client.post(f"{served.url}swap/", {"target": f"art_{theirs.pk}"}, follow=True)
        assert flashed(refused) == ["No such artifact."]
        mismatch = client.post(
            f"{served.url}swap/", {"target": f"art_{other_base.pk}"}, follow=True
        )
        (text,) = flashed(mismatch)
        assert "trained on 'another/model'" in text
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)

    def test_stop_stops_the_endpoint_and_asks_its_job_to_end(self, client_for, member, project):
        served = served_endpoint(project)

        response = client_for(member).post(f"{served.url}stop/", follow=True)

        assert flashed(response) == [
            "The endpoint is stopped; its serve job ends and billing stops."
        ]
        assert pointers(served.endpoint) == (2, 1, "stopped", 2, 2)
        assert set(served.endpoint.revisions.values_list("state", flat=True)) == {"retired"}
        served.endpoint.job.refresh_from_db()
        assert served.endpoint.job.state == JobState.TERMINATING
        body = response.content.decode()
        assert 'data-state="stopped"' in body and 'id="endpoint-controls"' not in body

    @pytest.mark.parametrize("action", ["swap", "rollback", "stop"])
    def test_a_viewers_post_is_refused_and_changes_nothing(
        self, client_for, viewer, project, action
    ):
        served = served_endpoint(project)

        response = client_for(viewer).post(
            f"{served.url}{action}/", {"target": f"art_{served.checkpoint.pk}"}
        )

        assert response.status_code == 403
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)
        served.endpoint.job.refresh_from_db()
        assert served.endpoint.job.state == JobState.RUNNING

    @pytest.mark.parametrize("action", ["swap", "rollback", "stop"])
    def test_the_forms_need_a_csrf_token(self, member, project, action):
        served = served_endpoint(project)
        client = Client(enforce_csrf_checks=True)
        client.force_login(member)

        response = client.post(f"{served.url}{action}/", {"target": f"art_{served.checkpoint.pk}"})

        assert response.status_code == 403
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)

    def test_with_the_pages_csrf_token_the_form_goes_through(self, member, project):
        served = served_endpoint(project)
        client = Client(enforce_csrf_checks=True)
        client.force_login(member)
        body = client.get(served.url).content.decode()
        form = re.search(r'<form id="rollback-form".*?</form>', body, re.S).group(0)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)

        response = client.post(f"{served.url}rollback/", {"csrfmiddlewaretoken": token})

        assert response.status_code == 302
        assert pointers(served.endpoint) == (1, 2, "ready", 2, 3)

    def test_gets_are_not_writes(self, client_for, member, project):
        served = served_endpoint(project)
        for action in ("swap", "rollback", "stop"):
            assert client_for(member).get(f"{served.url}{action}/").status_code == 405
        assert pointers(served.endpoint) == (2, 1, "ready", 2, 2)


# -- the websocket -------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


_sockets_reset = socket_counts_reset("trainyard:watchers:serving.*")


@pytest.mark.usefixtures("_sockets_reset")
class TestSocket:
    pytestmark = SOCKET_TEST

    async def test_anonymous_is_closed_4401(self, project):
        served = await database_sync_to_async(served_endpoint)(project)
        socket = await websocket(f"/ws/endpoints/{served.endpoint.public_id}/")
        await socket.connect()
        assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}

    async def test_another_organizations_endpoint_is_closed_4403(self, outsider, project):
        served = await database_sync_to_async(served_endpoint)(project)
        for endpoint_id in (served.endpoint.public_id, "ep_nope"):
            socket = await websocket(f"/ws/endpoints/{endpoint_id}/", outsider)
            assert (await socket.connect())[0]
            assert await socket.receive_output(timeout=2) == {
                "type": "websocket.close",
                "code": 4403,
            }

    async def test_a_rollback_pushes_the_status_and_tables_out_of_band(self, member, project):
        served = await database_sync_to_async(served_endpoint)(project)
        group = endpoint_group(served.endpoint.pk)
        socket = await websocket(f"/ws/endpoints/{served.endpoint.public_id}/", member)
        assert (await socket.connect())[0]
        assert await database_sync_to_async(watched)(group)

        await database_sync_to_async(services.endpoint_rollback)(
            endpoint=served.endpoint, who=services.Who(user=member)
        )
        html_ = await socket.receive_from(timeout=5)

        assert html_.startswith('<section id="endpoint-status" class="card endpoint-status"')
        status = re.search(r'<section id="endpoint-status"[^>]*>', html_).group(0)
        assert 'data-current="r1"' in status and 'data-previous="r2"' in status
        assert 'hx-swap-oob="true"' in status
        assert '<strong id="current-revision">r1</strong>' in html_
        assert '<div id="endpoint-revisions" hx-swap-oob="true">' in html_
        assert '<div id="endpoint-promotions" hx-swap-oob="true">' in html_
        assert re.findall(r'data-kind="(\w+)"', html_) == ["rollback", "swap", "first"]
        assert "csrfmiddlewaretoken" not in html_ and "<form" not in html_
        await socket.disconnect()
        assert not await database_sync_to_async(watched)(group)
