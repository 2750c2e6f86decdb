// The Playground: one prompt to every pane, their answers read from one multiplexed event
// stream (apps/playground/streaming.py): {"pane": i, "delta"}, {"pane": i, "usage",
// "finish_reason"}, {"pane": i, "error"}, then {"done": true}. `i` is the pane's place in
// the request's `panes`. Model output only ever goes into the page as textContent.
// Each pane keeps its own conversation (its answers differ); changing its target starts
// it afresh. While a server starts the run answers 503 playground_starting: the page polls
// the servers' status and sends again once they are ready.
(function () {
  "use strict";
  var root = document.getElementById("playground");
  if (!root) return;
  var form = document.getElementById("pg-prompt");
  var message = document.getElementById("pg-message");
  var sendButton = document.getElementById("pg-send");
  var abortButton = document.getElementById("pg-abort");
  var clearButton = document.getElementById("pg-clear");
  var notice = document.getElementById("pg-notice");
  var serverList = document.getElementById("pg-servers");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  var POLL_MS = 2000;
  var STARTING_GIVE_UP_MS = 15 * 60 * 1000;

  var panes = Array.prototype.map.call(document.querySelectorAll(".pg-pane"), function (el) {
    return {
      el: el,
      select: el.querySelector(".pg-target"),
      transcript: el.querySelector(".pg-transcript"),
      deploy: el.querySelector(".pg-deploy"),
      history: [],
      answer: null,
      text: "",
      firstAt: null,
      sentAt: null,
    };
  });

  function selected(pane) {
    var option = pane.select.selectedOptions[0];
    if (!option || !option.value) return null;
    return { value: option.value, kind: option.dataset.kind, baseModel: option.dataset.baseModel };
  }

  function stat(pane, name, value) {
    pane.el.querySelector('[data-stat="' + name + '"]').textContent = value;
  }

  function setStatus(pane, status) {
    pane.el.dataset.status = status;
  }

  function say(text) {
    notice.textContent = text;
  }

  // -- targets and the deploy form --------------------------------------------------------

  function syncDeploy(pane) {
    if (!pane.deploy) return;
    var target = selected(pane);
    var isArtifact = !!target && target.kind === "artifact";
    pane.deploy.hidden = !isArtifact;
    pane.deploy.querySelector("input[name=artifact]").value = isArtifact ? target.value : "";
  }

  function resetPane(pane) {
    pane.history = [];
    pane.answer = null;
    pane.transcript.textContent = "";
    ["ttft", "tps", "prompt", "completion"].forEach(function (name) { stat(pane, name, "—"); });
    setStatus(pane, "idle");
  }

  // The tiny random demo model cannot make sense: a pane talking to it says so beside its
  // answers, and the prompt form offers an example from the demo data while any pane does.
  var demoExample = document.getElementById("pg-demo-example");
  var exampleButton = document.getElementById("pg-example");

  function syncDemo() {
    var anyDemo = false;
    panes.forEach(function (pane) {
      var option = pane.select.selectedOptions[0];
      var demo = !!option && option.dataset.demo === "true";
      var note = pane.el.querySelector("[data-demo-note]");
      if (note) note.hidden = !demo;
      anyDemo = anyDemo || demo;
    });
    if (demoExample) demoExample.hidden = !anyDemo;
  }

  if (exampleButton) {
    exampleButton.addEventListener("click", function () {
      message.value = exampleButton.dataset.prompt;
      message.focus();
    });
  }

  panes.forEach(function (pane) {
    syncDeploy(pane);
    pane.select.addEventListener("change", function () {
      resetPane(pane);
      syncDeploy(pane);
      syncDemo();
      pollServers();
    });
  });
  syncDemo();

  clearButton.addEventListener("click", function () {
    panes.forEach(resetPane);
    say("");
    message.focus();
  });

  // -- servers --------------------------------------------------------------------------

  function basesInUse() {
    var bases = [];
    panes.forEach(function (pane) {
      var target = selected(pane);
      if (target && target.baseModel && bases.indexOf(target.baseModel) === -1) {
        bases.push(target.baseModel);
      }
    });
    return bases;
  }

  function showServers(servers) {
    serverList.textContent = "";
    servers.forEach(function (server) {
      var item = document.createElement("li");
      item.dataset.baseModel = server.base_model;
      item.dataset.state = server.state;
      var badge = document.createElement("span");
      badge.className = "badge pg-state pg-state-" + server.state;
      badge.textContent = server.state;
      var name = document.createElement("code");
      name.textContent = server.base_model;
      item.append(badge, " ", name);
      if (server.job) {
        var link = document.createElement("a");
        link.href = root.dataset.jobUrl.replace("JOB_ID", encodeURIComponent(server.job));
        link.textContent = server.job;
        item.append(" ", link);
      }
      serverList.append(item);
    });
  }

  var pollTimer = null;
  var waiters = [];  // called with the servers once none of those in use is starting

  function pollServers() {
    clearTimeout(pollTimer);
    var bases = basesInUse();
    if (!bases.length) { showServers([]); flushWaiters([]); return; }
    var query = bases.map(function (b) { return "base=" + encodeURIComponent(b); }).join("&");
    fetch(root.dataset.statusUrl + "?" + query, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response); })
      .then(function (body) {
        showServers(body.servers);
        var starting = body.servers.some(function (s) { return s.state === "starting"; });
        if (starting) pollTimer = setTimeout(pollServers, POLL_MS);
        else flushWaiters(body.servers);
      })
      .catch(function () { pollTimer = setTimeout(pollServers, POLL_MS * 2); });
  }

  function flushWaiters(servers) {
    var ready = waiters;
    waiters = [];
    ready.forEach(function (callback) { callback(servers); });
  }

  // -- a run ----------------------------------------------------------------------------

  var controller = null;
  var waiting = null;  // the panes of a run that waits for its servers to start

  function params() {
    var out = {};
    var temperature = document.getElementById("pg-temperature").value;
    var topP = document.getElementById("pg-top-p").value;
    var maxTokens = document.getElementById("pg-max-tokens").value;
    var seed = document.getElementById("pg-seed").value;
    var stop = document.getElementById("pg-stop").value.split("\n").filter(function (s) {
      return s.length > 0;
    });
    if (temperature !== "") out.temperature = parseFloat(temperature);
    if (topP !== "") out.top_p = parseFloat(topP);
    if (maxTokens !== "") out.max_tokens = parseInt(maxTokens, 10);
    if (seed !== "") out.seed = parseInt(seed, 10);
    if (stop.length) out.stop = stop;
    return out;
  }

  function bubble(pane, role, text) {
    var item = document.createElement("div");
    item.className = "pg-msg pg-" + role;
    item.textContent = text;
    pane.transcript.append(item);
    pane.transcript.scrollTop = pane.transcript.scrollHeight;
    return item;
  }

  function buildRun(active, userText) {
    var system = document.getElementById("pg-system").value.trim();
    var lead = system ? [{ role: "system", content: system }] : [];
    var turn = { role: "user", content: userText };
    var withHistory = active.some(function (pane) { return pane.history.length > 0; });
    return {
      messages: lead.concat([turn]),
      params: params(),
      panes: active.map(function (pane) {
        var target = selected(pane);
        var out = { target: target.value };
        if (target.kind === "base") out.base_model = target.baseModel;
        if (withHistory) out.messages = lead.concat(pane.history, [turn]);
        return out;
      }),
    };
  }

  function running(on) {
    sendButton.disabled = on;
    abortButton.disabled = !on;
    clearButton.disabled = on;
  }

  function start(event) {
    if (event) event.preventDefault();
    var userText = message.value.trim();
    if (!userText || controller || waiting) return;
    var active = panes.filter(function (pane) { return selected(pane) !== null; });
    if (!active.length) { say("Pick what at least one pane talks to."); return; }
    var body = buildRun(active, userText);
    active.forEach(function (pane) {
      bubble(pane, "user", userText);
      pane.answer = bubble(pane, "assistant", "");
      pane.text = "";
      pane.firstAt = null;
      ["ttft", "tps", "prompt", "completion"].forEach(function (name) { stat(pane, name, "—"); });
      setStatus(pane, "waiting");
    });
    message.value = "";
    running(true);
    send(active, body, userText, Date.now());
  }

  function send(active, body, userText, firstTry) {
    controller = new AbortController();
    var sentAt = performance.now();
    say("Sending…");
    fetch(root.dataset.runUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
      credentials: "same-origin",
    }).then(function (response) {
      if (response.ok) return read(response, active, sentAt, userText);
      return response.json().catch(function () { return {}; }).then(function (answer) {
        var error = answer.error || {};
        if (response.status === 503 && error.type === "playground_starting" &&
            Date.now() - firstTry < STARTING_GIVE_UP_MS) {
          say("The Playground server is starting; your message goes out once it is ready.");
          active.forEach(function (pane) { setStatus(pane, "starting"); });
          controller = null;
          waiting = active;
          waiters.push(function (servers) {
            waiting = null;
            // A server that stopped instead (its engine failed: its job says why) would
            // only be started again by another send: say so instead.
            if (servers.some(function (s) { return s.state === "stopped"; })) {
              fail(active, "The Playground server stopped before it was ready: its job says why.");
              return;
            }
            send(active, body, userText, firstTry);
          });
          pollServers();
          return;
        }
        fail(active, error.message || "The run was refused (" + response.status + ").");
      });
    }).catch(function (err) {
      if (err && err.name === "AbortError") finish(active, "Stopped.");
      else fail(active, "The connection broke off.");
    });
  }

  function read(response, active, sentAt, userText) {
    say("");
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function handle(data) {
      if (data.done) { finish(active, ""); return; }
      var pane = active[data.pane];
      if (!pane || !pane.answer) return;  // cleared, or its target changed, meanwhile
      if (typeof data.delta === "string") {
        if (pane.firstAt === null) {
          pane.firstAt = performance.now();
          stat(pane, "ttft", Math.round(pane.firstAt - sentAt) + " ms");
          setStatus(pane, "streaming");
        }
        pane.text += data.delta;
        pane.answer.textContent = pane.text;
        pane.transcript.scrollTop = pane.transcript.scrollHeight;
      } else if (data.error) {
        var note = document.createElement("p");
        note.className = "pg-error";
        note.textContent = data.error;
        pane.answer.append(note);
        setStatus(pane, "error");
      } else if ("usage" in data) {
        var usage = data.usage || {};
        var completion = usage.completion_tokens;
        stat(pane, "prompt", usage.prompt_tokens != null ? String(usage.prompt_tokens) : "—");
        stat(pane, "completion", completion != null ? String(completion) : "—");
        if (completion && pane.firstAt !== null) {
          var seconds = Math.max(performance.now() - pane.firstAt, 1) / 1000;
          stat(pane, "tps", (completion / seconds).toFixed(1));
        }
        if (pane.firstAt === null) stat(pane, "ttft", "no output");
        pane.el.dataset.finishReason = data.finish_reason || "";
        if (data.revision) pane.el.dataset.revision = data.revision;
        pane.history.push({ role: "user", content: userText }, { role: "assistant", content: pane.text });
        setStatus(pane, "done");
      }
    }
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) { finish(active, ""); return; }
        buffer += decoder.decode(chunk.value, { stream: true });
        var cut;
        while ((cut = buffer.indexOf("\n\n")) !== -1) {
          var block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          block.split("\n").forEach(function (line) {
            if (line.indexOf("data: ") !== 0) return;
            try { handle(JSON.parse(line.slice(6))); } catch (err) { console.warn("playground: unreadable event", err); }
          });
        }
        return pump();
      });
    }
    return pump();
  }

  function finish(active, text) {
    active.forEach(function (pane) {
      var status = pane.el.dataset.status;
      if (status === "waiting" || status === "streaming" || status === "starting") {
        setStatus(pane, "stopped");
      }
    });
    controller = null;
    running(false);
    say(text);
  }

  function fail(active, text) {
    active.forEach(function (pane) {
      if (pane.answer) {
        var note = document.createElement("p");
        note.className = "pg-error";
        note.textContent = text;
        pane.answer.append(note);
      }
      setStatus(pane, "error");
    });
    controller = null;
    running(false);
    say(text);
  }

  form.addEventListener("submit", start);
  message.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) start(event);
  });
  abortButton.addEventListener("click", function () {
    if (controller) controller.abort();
    if (waiting) {
      waiters = [];
      var active = waiting;
      waiting = null;
      finish(active, "Stopped.");
    }
  });

  pollServers();
})();
