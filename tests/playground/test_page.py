"""The Playground page, its run view's checks and the idle stop, without an engine: what a
member, a viewer and an outsider see; what the run refuses (and that a refusal changes
nothing); and the serve job a first use starts (the page's Start button or a run, never
opening the page), once however many ask at once."""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.playground import services, tasks
from apps.playground.models import PlaygroundServer
from apps.serving import payloads
from apps.serving.models import Endpoint
from tests.playground.conftest import BASE_MODEL

PAGE = "/o/acme/projects/vision/playground/"
RUN = "/o/acme/projects/vision/playground/run"
STATUS = "/o/acme/projects/vision/playground/status"
DEPLOY = "/o/acme/projects/vision/playground/deploy"
HELLO = [{"role": "user", "content": "Hello"}]


class _Panes(HTMLParser):
    """The options each pane's target picker holds, and the one selected."""

    def __init__(self) -> None:
        super().__init__()
        self.options: dict[str, list[dict]] = {}
        self.selected: dict[str, dict] = {}
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = {name: value or "" for name, value in attrs}
        if tag == "select" and attributes.get("id", "").startswith("pane-"):
            self._select = attributes["id"].removesuffix("-target")
            self.options[self._select] = []
        elif tag == "option" and self._select:
            self.options[self._select].append(attributes)
            if "selected" in attributes:
                self.selected[self._select] = attributes

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def _panes(response) -> _Panes:
    parser = _Panes()
    parser.feed(response.content.decode())
    return parser


def _art(artifact) -> str:
    return f"art_{artifact.pk}"


def _run(client: Client, body, **headers):
    return client.post(
        RUN,
        data=body if isinstance(body, str | bytes) else json.dumps(body),
        content_type="application/json",
        **headers,
    )


def _serve_jobs():
    return Job.objects.filter(kind=Job.Kind.SERVE)


def _start(client: Client, query: str = ""):
    """The page's "Start servers" button."""
    return client.post(f"{PAGE}{query}")


# -- the page --------------------------------------------------------------------------------


def test_it_opens_a_jobs_final_adapter_beside_its_base_model(client_for, member, tuned):
    client = client_for(member)
    response = client.get(f"{PAGE}?job={tuned.job.public_id}")

    assert response.status_code == 200
    panes = _panes(response)
    assert panes.selected["pane-0"]["value"] == "base"
    assert panes.selected["pane-0"]["data-base-model"] == BASE_MODEL
    assert panes.selected["pane-1"]["value"] == _art(tuned.adapter)
    assert panes.selected["pane-2"]["value"] == ""
    # The pickers list the fine-tune's adapter and checkpoint.
    values = {option["value"] for option in panes.options["pane-2"]}
    assert {_art(tuned.adapter), _art(tuned.checkpoint), "base", ""} <= values
    # Opening the page starts nothing; it offers to.
    assert not PlaygroundServer.objects.exists() and not _serve_jobs().exists()
    assert b'data-state="stopped"' in response.content
    assert b"Start servers" in response.content
    assert b"Deploy as endpoint" in response.content

    started = _start(client, f"?job={tuned.job.public_id}")

    assert started.status_code == 302
    assert started["Location"] == f"{PAGE}?job={tuned.job.public_id}"
    # Its server started: one serve job for the base model, for the Playground.
    server = PlaygroundServer.objects.get()
    assert (server.organization, server.base_model, server.started_by) == (
        tuned.job.organization,
        BASE_MODEL,
        member,
    )
    job = _serve_jobs().get()
    assert server.job == job and job.state == JobState.REQUESTED
    assert payloads.serves_for(job) == payloads.PLAYGROUND
    assert payloads.base_model_of(job) == BASE_MODEL
    page = client.get(started["Location"])
    assert b'data-state="starting"' in page.content
    assert b"Start servers" not in page.content


def test_a_pane_on_the_demo_model_says_it_is_tiny_and_random_and_offers_an_example(
    client_for, member, make_finetune, project
):
    demo = make_finetune(project, name="demo-tune", base_model="acme/tiny-llama")
    response = client_for(member).get(f"{PAGE}?job={demo.job.public_id}")

    assert response.status_code == 200
    panes = _panes(response)
    # Pane 1 (the demo base model) and pane 2 (its adapter) are marked; the picker knows
    # which choices are the demo model's, so the notes follow a change of pane.
    assert panes.selected["pane-0"]["data-demo"] == "true"
    assert panes.selected["pane-1"]["data-demo"] == "true"
    body = response.content.decode()
    for index in (0, 1):
        note = re.search(rf'<p class="pg-demo-warning" id="pane-{index}-demo"[^>]*>', body)
        assert note and "hidden" not in note.group(0)
    assert re.search(r'<p class="pg-demo-warning" id="pane-2-demo"[^>]*hidden', body)
    assert "Tiny random demo model:</strong> it cannot make sense" in body
    assert '<div class="pg-demo-example" id="pg-demo-example">' in body
    assert 'id="pg-example" data-prompt="Reverse the letters.\nc a f"' in body


def test_a_pane_on_another_model_shows_no_demo_note(client_for, member, tuned):
    response = client_for(member).get(f"{PAGE}?job={tuned.job.public_id}")

    panes = _panes(response)
    assert all("data-demo" not in option for option in panes.options["pane-0"])
    body = response.content.decode()
    assert (
        len(re.findall(r'class="pg-demo-warning" id="pane-\d-demo" data-demo-note hidden', body))
        == 3
    )
    assert '<div class="pg-demo-example" id="pg-demo-example" hidden>' in body
    assert "Reverse the letters." not in body.split('id="pg-message"')[1].split("</textarea>")[0]


def test_opening_the_page_never_starts_a_billed_server(member, tuned):
    """A link to the page (or any top-level navigation, which takes Lax cookies along)
    spends nothing: only a CSRF-checked POST starts a server."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    query = f"?job={tuned.job.public_id}&artifact={_art(tuned.checkpoint)}"

    for _ in range(2):
        assert client.get(f"{PAGE}{query}").status_code == 200
    assert _start(client, query).status_code == 403  # no CSRF token: refused

    assert not PlaygroundServer.objects.exists() and not _serve_jobs().exists()
    token = client.cookies["csrftoken"].value
    assert client.post(f"{PAGE}{query}", {"csrfmiddlewaretoken": token}).status_code == 302
    assert _serve_jobs().count() == 1


def test_it_opens_a_checkpoint_named_by_its_artifact_id(client_for, member, tuned):
    response = client_for(member).get(f"{PAGE}?artifact={_art(tuned.checkpoint)}")

    panes = _panes(response)
    assert panes.selected["pane-0"]["data-base-model"] == BASE_MODEL
    assert panes.selected["pane-1"]["value"] == _art(tuned.checkpoint)
    assert panes.selected["pane-1"]["data-kind"] == "artifact"


def test_a_job_and_an_artifact_open_in_panes_two_and_three(client_for, member, tuned):
    response = client_for(member).get(
        f"{PAGE}?job={tuned.job.public_id}&artifact={_art(tuned.checkpoint)}"
    )

    panes = _panes(response)
    assert [panes.selected[f"pane-{i}"]["value"] for i in range(3)] == [
        "base",
        _art(tuned.adapter),
        _art(tuned.checkpoint),
    ]
    assert not PlaygroundServer.objects.exists() and not _serve_jobs().exists()
    _start(client_for(member), f"?job={tuned.job.public_id}&artifact={_art(tuned.checkpoint)}")
    assert PlaygroundServer.objects.count() == 1 and _serve_jobs().count() == 1


def test_a_second_start_uses_the_running_server(client_for, member, tuned):
    client = client_for(member)
    _start(client, f"?job={tuned.job.public_id}")
    _start(client, f"?job={tuned.job.public_id}")

    assert _serve_jobs().count() == 1


def test_another_orgs_artifact_and_job_are_never_shown(client_for, member, tuned, foreign):
    other_ids = [_art(foreign.adapter), _art(foreign.checkpoint), foreign.job.public_id]
    for query in (f"artifact={other_ids[0]}", f"job={foreign.job.public_id}"):
        response = client_for(member).get(f"{PAGE}?{query}")

        assert response.status_code == 200
        html = response.content.decode()
        for other in other_ids:
            assert not re.search(rf"{other}\b", html)
        assert foreign.job.name not in html
        # What is preloaded is the organization's own default: its base and its adapter.
        panes = _panes(response)
        assert panes.selected["pane-1"]["value"] == _art(tuned.adapter)
    assert not PlaygroundServer.objects.filter(organization=foreign.job.organization).exists()


def test_an_outsider_gets_404_for_the_organization(client_for, outsider, tuned):
    client = client_for(outsider)
    assert client.get(PAGE).status_code == 404
    assert client.get(f"{PAGE}?job={tuned.job.public_id}").status_code == 404
    assert client.get(f"{STATUS}?base={BASE_MODEL}").status_code == 404
    assert _start(client, f"?job={tuned.job.public_id}").status_code == 404
    response = _run(client, {"messages": HELLO, "panes": [{"target": "base"}]})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"
    assert not PlaygroundServer.objects.exists() and not _serve_jobs().exists()


def test_a_viewer_can_chat_but_sees_no_deploy_form(client_for, viewer, tuned):
    client = client_for(viewer)
    response = client.get(f"{PAGE}?job={tuned.job.public_id}")

    assert response.status_code == 200
    assert b'id="pg-prompt"' in response.content
    assert b"Deploy as endpoint" not in response.content
    assert b'class="pg-deploy"' not in response.content
    assert b"Start servers" not in response.content
    assert _start(client, f"?job={tuned.job.public_id}").status_code == 403
    assert not _serve_jobs().exists()
    response = client.post(DEPLOY, {"artifact": _art(tuned.adapter), "name": "bot"})
    assert response.status_code == 403
    assert not Endpoint.objects.exists()


def test_a_viewer_never_starts_a_billed_server_but_chats_on_a_running_one(
    client_for, viewer, member, tuned
):
    viewing = client_for(viewer)
    assert viewing.get(f"{PAGE}?job={tuned.job.public_id}").status_code == 200
    refused = _run(viewing, {"messages": HELLO, "panes": [{"target": "base"}]})
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_denied"
    assert not _serve_jobs().exists()

    _start(client_for(member), f"?job={tuned.job.public_id}")  # a member starts it
    assert _serve_jobs().count() == 1
    starting = _run(viewing, {"messages": HELLO, "panes": [{"target": "base"}]})
    assert starting.status_code == 503
    assert _serve_jobs().count() == 1


def test_the_page_without_fine_tunes_has_panes_switched_off(client_for, member, project):
    response = client_for(member).get(PAGE)

    assert response.status_code == 200
    panes = _panes(response)
    assert [panes.selected[f"pane-{i}"]["value"] for i in range(3)] == ["", "", ""]
    assert not _serve_jobs().exists()


def test_the_project_page_links_to_its_playground(client_for, member, project):
    response = client_for(member).get("/o/acme/projects/vision/")
    assert f'href="{PAGE}"'.encode() in response.content


def test_the_job_page_and_its_artifacts_link_into_the_playground(client_for, member, tuned):
    response = client_for(member).get(f"/o/acme/jobs/{tuned.job.public_id}/")

    html = response.content.decode()
    assert f'href="{PAGE}?job={tuned.job.public_id}">Open in Playground</a>' in html
    for artifact in (tuned.adapter, tuned.checkpoint):
        assert f'href="{PAGE}?artifact={_art(artifact)}"' in html


def test_a_job_still_running_offers_no_playground_link(client_for, member, tuned):
    Job.objects.filter(pk=tuned.job.pk).update(state=JobState.RUNNING)
    response = client_for(member).get(f"/o/acme/jobs/{tuned.job.public_id}/")
    assert b"Open in Playground" not in response.content


# -- status ----------------------------------------------------------------------------------


def test_the_status_says_a_server_is_starting_and_an_unknown_one_stopped(client_for, member, tuned):
    client = client_for(member)
    _start(client, f"?job={tuned.job.public_id}")
    job = _serve_jobs().get()

    response = client.get(STATUS, {"base": [BASE_MODEL, "nobody/else"]})

    assert response.json() == {
        "servers": [
            {"base_model": BASE_MODEL, "state": "starting", "job": job.public_id},
            {"base_model": "nobody/else", "state": "stopped", "job": None},
        ]
    }
    assert _serve_jobs().count() == 1  # reading the status starts nothing


# -- deploy ----------------------------------------------------------------------------------


def test_a_bad_endpoint_name_comes_back_as_a_message(client_for, member, tuned):
    client = client_for(member)
    response = client.post(DEPLOY, {"artifact": _art(tuned.adapter), "name": "Not A Name"})

    assert response.status_code == 302
    assert response["Location"] == f"{PAGE}?artifact={_art(tuned.adapter)}"
    page = client.get(response["Location"])
    assert b"Not deployed: A name is 1 to 63 lowercase letters" in page.content
    assert not Endpoint.objects.exists()


def test_another_orgs_artifact_cannot_be_deployed(client_for, member, project, foreign):
    response = client_for(member).post(DEPLOY, {"artifact": _art(foreign.adapter), "name": "x"})
    assert response.status_code == 302
    assert response["Location"] == PAGE
    assert not Endpoint.objects.exists()


def test_deploying_an_adapter_creates_its_endpoint_and_opens_its_page(client_for, member, tuned):
    response = client_for(member).post(
        DEPLOY, {"artifact": _art(tuned.checkpoint), "name": "support-bot"}
    )

    endpoint = Endpoint.objects.get()
    assert (endpoint.name, endpoint.base_model) == ("support-bot", BASE_MODEL)
    assert endpoint.revisions.get().artifact == tuned.checkpoint
    assert response.status_code == 302
    assert response["Location"] == f"/o/acme/endpoints/{endpoint.public_id}/"


# -- the run's checks ------------------------------------------------------------------------


BAD_BODIES = [
    ("not json", None, "The body is not valid JSON."),
    ("[1, 2]", None, "The body is a JSON object."),
    ({"messages": HELLO}, "panes", "panes is a list of 1 to 3 panes."),
    ({"messages": HELLO, "panes": []}, "panes", "panes is a list of 1 to 3 panes."),
    (
        {"messages": HELLO, "panes": [{"target": "base"}] * 4},
        "panes",
        "panes is a list of 1 to 3 panes.",
    ),
    ({"messages": HELLO, "panes": [{"target": "base"}], "model": "x"}, "model", "Unknown field."),
    (
        {"messages": HELLO, "panes": [{"target": "gpt-4"}]},
        "panes[0].target",
        'target is "base", "art_…", "hub:<org>/<name>[@rev]" or "ep_…".',
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base", "colour": "red"}]},
        "panes[0]",
        'A pane is {"target": …} (with "base_model" or "messages").',
    ),
    ({"panes": [{"target": "base"}]}, "messages", "messages is required."),
    (
        {"messages": [], "panes": [{"target": "base"}]},
        "messages",
        "messages is a non-empty list of messages.",
    ),
    (
        {"messages": [{"role": "robot", "content": "hi"}], "panes": [{"target": "base"}]},
        "messages[0].role",
        "role is one of system, user, assistant.",
    ),
    (
        {"messages": [{"role": "user", "content": 5}], "panes": [{"target": "base"}]},
        "messages[0].content",
        "content is a string.",
    ),
    (
        {"messages": [{"role": "system", "content": "Be brief."}], "panes": [{"target": "base"}]},
        "messages",
        "The messages hold no user message.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"temperature": 3}},
        "params.temperature",
        "temperature is a number from 0 to 2.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"top_p": 0}},
        "params.top_p",
        "top_p is a number above 0, at most 1.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"max_tokens": 0}},
        "params.max_tokens",
        "max_tokens is a whole number from 1 to 2048.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"seed": True}},
        "params.seed",
        "seed is a whole number from 0 to 2147483647.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"stop": [""]}},
        "params.stop",
        "stop is up to 4 strings of 1 to 64 characters.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base"}], "params": {"logprobs": 5}},
        "params.logprobs",
        "Unknown parameter.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "base", "base_model": "evil/model"}]},
        "panes[0].base_model",
        "Not a base model of this project's fine-tunes or of the other panes.",
    ),
    (
        {"messages": HELLO, "panes": [{"target": "art_x"}]},
        "panes[0].target",
        None,  # a malformed artifact id is not the organization's: not found
    ),
]


@pytest.mark.parametrize(("body", "param", "message"), BAD_BODIES)
def test_the_run_refuses_a_bad_body_with_400_and_changes_nothing(
    client_for, member, tuned, body, param, message
):
    response = _run(client_for(member), body)

    if message is None:
        assert response.status_code == 404
        assert response.json() == {
            "error": {"type": "not_found", "message": "No such artifact.", "param": param}
        }
    else:
        assert response.status_code == 400
        assert response.json() == {
            "error": {"type": "invalid_request", "message": message, "param": param}
        }
    assert not PlaygroundServer.objects.exists() and not _serve_jobs().exists()


def test_the_run_does_not_find_another_orgs_artifact(client_for, member, tuned, foreign):
    response = _run(
        client_for(member), {"messages": HELLO, "panes": [{"target": _art(foreign.adapter)}]}
    )

    assert response.status_code == 404
    assert response.json()["error"] == {
        "type": "not_found",
        "message": "No such artifact.",
        "param": "panes[0].target",
    }
    assert not _serve_jobs().exists()


def test_the_run_needs_a_signed_in_member(db, tuned):
    response = _run(Client(), {"messages": HELLO, "panes": [{"target": "base"}]})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"


def test_the_run_needs_the_csrf_header(member, tuned):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    body = {"messages": HELLO, "panes": [{"target": "base"}]}

    assert _run(client, body).status_code == 403
    assert not _serve_jobs().exists()

    client.get(PAGE)  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = _run(client, body, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 503


def test_the_run_answers_503_while_the_server_starts(client_for, member, tuned):
    body = {
        "messages": HELLO,
        "params": {"temperature": 0, "max_tokens": 8},
        "panes": [{"target": "base"}, {"target": _art(tuned.adapter)}],
    }
    response = _run(client_for(member), body)

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "error": {
            "type": "playground_starting",
            "message": f"The Playground server for {BASE_MODEL} is starting; "
            "try again in a few seconds.",
            "param": None,
        }
    }
    server = PlaygroundServer.objects.get()
    assert server.job == _serve_jobs().get()
    assert server.adapters.count() == 0  # adapters load once the engine runs


def test_a_server_whose_job_ended_gets_a_new_one(client_for, member, tuned):
    client = client_for(member)
    body = {"messages": HELLO, "panes": [{"target": "base"}]}
    _run(client, body)
    first = _serve_jobs().get()
    job_services.job_terminate(job=first)
    assert _run(client, body).status_code == 503

    server = PlaygroundServer.objects.get()
    assert server.job != first and server.job.state == JobState.REQUESTED
    assert _serve_jobs().count() == 2


def test_an_organization_without_compute_cannot_start_a_server(client_for, member, org, tuned):
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])
    response = _run(client_for(member), {"messages": HELLO, "panes": [{"target": "base"}]})

    assert response.status_code == 403
    assert response.json()["error"]["type"] == "tenant_disabled"
    assert not _serve_jobs().exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_two_first_runs_at_once_start_one_serve_job(member, tuned):
    body = {"messages": HELLO, "panes": [{"target": _art(tuned.adapter)}]}
    start = threading.Barrier(2)
    answers: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client = Client()
            client.force_login(member)
            start.wait(10)
            answers.append(_run(client, body).status_code)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    assert answers == [503, 503]
    assert PlaygroundServer.objects.count() == 1
    assert _serve_jobs().count() == 1
    assert PlaygroundServer.objects.get().job == _serve_jobs().get()


# -- the idle stop and the tasks ------------------------------------------------------------


def test_stop_idle_terminates_an_idle_servers_job_and_not_a_fresh_one(
    member, project, tuned, make_finetune, settings
):
    make_finetune(project, name="other-base", base_model="acme-labs/other")
    idle = services.server_for(
        organization=project.organization, project=project, base_model=BASE_MODEL, user=member
    )
    fresh = services.server_for(
        organization=project.organization,
        project=project,
        base_model="acme-labs/other",
        user=member,
    )
    PlaygroundServer.objects.filter(pk=idle.pk).update(
        last_used_at=timezone.now() - timedelta(seconds=settings.PLAYGROUND_IDLE_S + 5)
    )

    assert services.stop_idle() == 1

    idle_job, fresh_job = Job.objects.get(pk=idle.job_id), Job.objects.get(pk=fresh.job_id)
    assert (idle_job.state, idle_job.reason) == (JobState.TERMINATED, "idle")
    assert fresh_job.state == JobState.REQUESTED
    assert services.stop_idle() == 0  # an ended job is not stopped twice
    # The idle server's next use starts it again.
    again = services.server_for(
        organization=project.organization, project=project, base_model=BASE_MODEL, user=member
    )
    assert again.pk == idle.pk and again.job_id not in (idle_job.pk, fresh_job.pk)


def test_the_idle_stop_task_and_the_ready_task_run(member, project, tuned, settings):
    server = services.server_for(
        organization=project.organization, project=project, base_model=BASE_MODEL, user=member
    )
    long_ago = timezone.now() - timedelta(seconds=settings.PLAYGROUND_IDLE_S + 5)
    PlaygroundServer.objects.filter(pk=server.pk).update(last_used_at=long_ago)

    tasks.server_ready(server.job_id)  # the engine announced its port: used from now
    tasks.stop_idle()

    server.refresh_from_db()
    assert server.last_used_at > long_ago
    assert Job.objects.get(pk=server.job_id).state == JobState.REQUESTED
    PlaygroundServer.objects.filter(pk=server.pk).update(last_used_at=long_ago)
    tasks.stop_idle()
    assert Job.objects.get(pk=server.job_id).state == JobState.TERMINATED
