"""The Playground's run through the whole system: the page's own HTTP calls (a signed-in
session with its CSRF header) against the live stack, whose Playground server is a real
serve job running the engine on the local provider. One run's panes share one engine and
come back as one multiplexed stream; adapters load on demand, the least recently used
unloaded past MAX_ADAPTERS; an endpoint's pane goes to the endpoint's own engine; a client
that hangs up stops the generation."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from django.test import Client
from django.utils.crypto import get_random_string

from apps.hub import blobs as hub_blobs
from apps.hub import repos as hub_repos
from apps.jobs.models import Job
from apps.playground import services
from apps.playground.models import PlaygroundServer
from apps.serving import engine_client
from apps.serving import selectors as serving_selectors
from apps.serving import services as serving_services
from apps.serving.models import Endpoint
from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory
from tests.integration.stack import wait_for
from tests.serving.fixtures import finished_finetune

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PROMPT = [{"role": "user", "content": "Reverse the letters: a b c"}]
GREEDY = {"temperature": 0, "max_tokens": 8}


@pytest.fixture
def lab(live_stack, settings, tiny_model, tiny_adapters):
    """An organization with compute, a member, and a completed fine-tune (adapter `a` and a
    checkpoint) of the tiny model stored where the stack reads artifacts."""
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"
    org = OrganizationFactory(slug="lab", compute_enabled=True)
    project = ProjectFactory(organization=org, slug="bench", name="Bench")
    member = MembershipFactory(organization=org, role="member", user=UserFactory()).user
    tuned = finished_finetune(
        project=project,
        tiny_model=tiny_model,
        adapter_dir=tiny_adapters["a"],
        checkpoint_dir=tiny_adapters["a_checkpoint"],
        name="tuned-a",
    )
    return {"org": org, "project": project, "member": member, "tuned": tuned}


@pytest.fixture
def browser_session(live_stack, lab) -> httpx.Client:
    """What the page's script sends: the session cookie, and the CSRF cookie and header."""
    client = Client()
    client.force_login(lab["member"])
    token = get_random_string(32)
    session = httpx.Client(
        base_url=f"{live_stack.url}/o/lab/projects/bench/playground/",
        cookies={"sessionid": client.cookies["sessionid"].value, "csrftoken": token},
        headers={"X-CSRFToken": token},
        timeout=60,
    )
    yield session
    session.close()


def _events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def _run(session: httpx.Client, panes: list[dict], **params) -> list[dict]:
    body = {"messages": PROMPT, "params": {**GREEDY, **params}, "panes": panes}
    with session.stream("POST", "run", json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return _events(response)


def _ready(session: httpx.Client, base_model: str, timeout: float = 180) -> None:
    wait_for(
        lambda: (
            session.get("status", params={"base": base_model}).json()["servers"][0]["state"]
            == "ready"
        ),
        timeout=timeout,
        what="the Playground server to be ready",
    )


def _texts(events: list[dict], panes: int) -> list[str]:
    return ["".join(e.get("delta", "") for e in events if e.get("pane") == i) for i in range(panes)]


def _engine(org) -> engine_client.EngineAddress:
    server = PlaygroundServer.objects.get(organization=org)
    return services.engine_for(server)


def _loaded(org) -> set[str]:
    return engine_client.loaded_models(_engine(org))


def _push_adapter(org, adapter_dir, name="support-lora"):
    """An adapter pushed to the organization's hub (tagged v1), as the stock client would."""
    repo = hub_repos.create_repo(org, "model", name)
    files = {
        path.name: hub_blobs.store_bytes(org, path.read_bytes())
        for path in adapter_dir.iterdir()
        if path.is_file()
    }
    commit = hub_repos.commit(
        repo, branch="main", changes=hub_repos.Changes(files), summary="adapter"
    )
    hub_repos.create_ref(repo, "tag", "v1", commit)
    return commit


def test_one_run_streams_every_pane_multiplexed(browser_session, lab, tiny_model, tiny_adapters):
    tuned = lab["tuned"]
    panes = [
        {"target": "base"},
        {"target": f"art_{tuned.adapter.pk}"},
        {"target": f"art_{tuned.checkpoint.pk}"},
    ]
    starting = browser_session.post("run", json={"messages": PROMPT, "panes": panes})
    assert starting.status_code == 503
    assert starting.json()["error"]["type"] == "playground_starting"
    _ready(browser_session, str(tiny_model))

    events = _run(browser_session, panes)

    assert events[-1] == {"done": True}
    for index in range(3):
        mine = [e for e in events if e.get("pane") == index]
        assert mine and all(set(e) == {"pane", "delta"} for e in mine[:-1])
        end = mine[-1]
        assert set(end) == {"pane", "usage", "finish_reason"}, end
        assert end["finish_reason"] in {"stop", "length"}
        assert end["usage"]["prompt_tokens"] > 0 and end["usage"]["completion_tokens"] > 0
        assert end["usage"]["total_tokens"] == (
            end["usage"]["prompt_tokens"] + end["usage"]["completion_tokens"]
        )
    texts = _texts(events, 3)
    assert all(texts) and texts[0] != texts[1]
    # Greedy answers are the same again, each pane's its own, in a new run.
    assert _texts(_run(browser_session, panes), 3) == texts
    assert _loaded(lab["org"]) == {"base", f"pg-{tuned.adapter.pk}", f"pg-{tuned.checkpoint.pk}"}
    assert Job.objects.filter(kind=Job.Kind.SERVE).count() == 1
    # The panes' requests reached the engine together: it decoded them in one batch.
    engine = _engine(lab["org"])
    stats = httpx.get(f"{engine.url}/trainyard/stats", headers=engine.headers).json()
    assert stats["max_batch_seen"] >= 2, stats

    # An adapter in the organization's hub is a pane's target as well.
    commit = _push_adapter(lab["org"], tiny_adapters["b"])
    assert "Hub · lab/support-lora@main" in browser_session.get("").text  # listed
    hub_events = _run(browser_session, [{"target": "hub:lab/support-lora@v1"}])
    assert "usage" in hub_events[-2], hub_events[-2]
    assert _texts(hub_events, 1)[0]
    assert f"pg-h{commit.pk}" in _loaded(lab["org"])
    refused = browser_session.post(
        "run", json={"messages": PROMPT, "panes": [{"target": "hub:other/support-lora"}]}
    )
    assert refused.status_code == 404


def test_adapters_load_on_demand_and_the_least_recently_used_go_first(
    browser_session, lab, tiny_model, tiny_adapters
):
    extra = [
        finished_finetune(
            project=lab["project"],
            tiny_model=tiny_model,
            adapter_dir=tiny_adapters["b"],
            name=f"tuned-{n}",
        ).adapter
        for n in range(services.MAX_ADAPTERS)
    ]
    adapters = [lab["tuned"].adapter, *extra]  # one more than an engine holds
    browser_session.post("run", json={"messages": PROMPT, "panes": [{"target": "base"}]})
    _ready(browser_session, str(tiny_model))

    for artifact in adapters:
        events = _run(browser_session, [{"target": f"art_{artifact.pk}"}])
        assert "usage" in events[-2], events[-2]

    names = [f"pg-{artifact.pk}" for artifact in adapters]
    assert _loaded(lab["org"]) == {"base", *names[1:]}  # the first, least recent, went
    # Asked for again, it is loaded again in place of the least recent now.
    events = _run(browser_session, [{"target": f"art_{adapters[0].pk}"}])
    assert "usage" in events[-2]
    assert _loaded(lab["org"]) == {"base", names[0], *names[2:]}


def test_a_client_that_hangs_up_stops_the_generation(browser_session, lab, tiny_model):
    browser_session.post("run", json={"messages": PROMPT, "panes": [{"target": "base"}]})
    _ready(browser_session, str(tiny_model))
    engine = _engine(lab["org"])

    def stats() -> dict:
        return httpx.get(f"{engine.url}/trainyard/stats", headers=engine.headers).json()

    before = stats()
    panes = [{"target": "base"}, {"target": f"art_{lab['tuned'].adapter.pk}"}]
    body = {"messages": PROMPT, "params": {"temperature": 1, "max_tokens": 400}, "panes": panes}
    with browser_session.stream("POST", "run", json=body) as response:
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: ") and "delta" in line:
                break
    hung_up = time.monotonic()
    # Both upstream streams closed: the engine cancels what is still generating (a pane
    # may have reached its end of text first; the first delta came while one generated).
    wait_for(
        lambda: (
            (now := stats())["requests_in_flight"] == 0
            and now["cancelled_total"] >= before["cancelled_total"] + 1
        ),
        timeout=2.0,
        what="the engine to see the hang-up",
    )
    assert time.monotonic() - hung_up < 2.0
    settled = stats()["generated_tokens_total"]
    time.sleep(0.5)  # long enough for a generation that went on to show
    assert stats()["generated_tokens_total"] == settled
    assert settled - before["generated_tokens_total"] < 2 * 400


def test_an_endpoint_pane_is_answered_by_the_endpoints_engine(browser_session, lab, tiny_model):
    tuned = lab["tuned"]
    endpoint = serving_services.endpoint_create(
        organization=lab["org"],
        project_id=lab["project"].public_id,
        name="support-bot",
        base_model=str(tiny_model),
        target={"artifact": f"art_{tuned.adapter.pk}"},
    )
    panes = [{"target": endpoint.public_id}, {"target": f"art_{tuned.adapter.pk}"}]
    assert browser_session.post("run", json={"messages": PROMPT, "panes": panes}).status_code == 503
    _ready(browser_session, str(tiny_model))
    wait_for(
        lambda: serving_selectors.endpoint_engine(Endpoint.objects.get(pk=endpoint.pk)),
        timeout=180,
        what="the endpoint to serve r1",
    )

    events = _run(browser_session, panes)

    ends = [e for e in events if "usage" in e]
    assert [(e["pane"], e.get("revision")) for e in sorted(ends, key=lambda e: e["pane"])] == [
        (0, "r1"),
        (1, None),
    ]
    # Two engines, one adapter, greedy: the same answer.
    texts = _texts(events, 2)
    assert texts[0] and texts[0] == texts[1]
    # The endpoint's engine answered under its revision's name; nothing of the Playground
    # was loaded there.
    engine, _ = serving_selectors.endpoint_engine(Endpoint.objects.get(pk=endpoint.pk))
    assert engine_client.loaded_models(engine) == {"base", "support-bot-r1"}
