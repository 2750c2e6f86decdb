"""The live-vs-reload check of a job page: every fact it shows (`[data-fact]`, the status,
cost, attempts table and Configuration) must read the same on a page that followed the run
over its websocket as on a fresh load of it."""

from __future__ import annotations

import time

COLLECT = """() => {
  const facts = {};
  document.querySelectorAll("[data-fact]").forEach((el) => {
    facts[el.dataset.fact] = el.innerText.replace(/\\s+/g, " ").trim();
  });
  return facts;
}"""


def page_facts(page) -> dict[str, str]:
    return page.evaluate(COLLECT)


def assert_live_page_matches_a_reload(page, timeout_s: float = 10) -> dict[str, str]:
    """Open the page afresh in a second tab and compare fact by fact. The live page may still
    be receiving the run's last pushes, so it gets `timeout_s` to agree; then every fact must
    match (and there must be facts at all)."""
    fresh = page.context.new_page()
    try:
        fresh.goto(page.url)
        fresh.wait_for_load_state("load")
        reloaded = page_facts(fresh)
    finally:
        fresh.close()
    deadline = time.monotonic() + timeout_s
    live = page_facts(page)
    while live != reloaded and time.monotonic() < deadline:
        page.wait_for_timeout(200)
        live = page_facts(page)
    assert {"state", "provider", "started", "ended", "duration", "cost"} <= set(reloaded)
    differing = {
        name: (live.get(name), reloaded.get(name))
        for name in set(live) | set(reloaded)
        if live.get(name) != reloaded.get(name)
    }
    assert not differing, f"live page vs reload (live, reloaded): {differing}"
    return live
