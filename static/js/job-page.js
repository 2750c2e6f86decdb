// The job page: trusts the websocket only as far as its sequence numbers allow.
// Each push carries the job's live sequence number (#job-live data-seq). A push at or below
// what the page holds is a duplicate and is dropped; one that skips a number means a push
// was lost, so the page fetches everything newer than the ids it holds (the same partials)
// instead. Each time the socket opens it does the same. The loss chart grows from pushed points.
(function () {
  "use strict";
  var page = document.getElementById("job-page");
  if (!page) return;
  var lastSeq = parseInt(page.dataset.seq, 10) || 0;
  var catchingUp = false;
  var missedWhileCatchingUp = 0;
  var SEQ = /id="job-live" data-seq="(\d+)"/;

  function maxId(selector, prefix) {
    var max = 0;
    document.querySelectorAll(selector).forEach(function (el) {
      var n = parseInt(el.id.slice(prefix.length), 10);
      if (n > max) max = n;
    });
    return max;
  }

  function catchUp() {
    if (catchingUp) return;
    catchingUp = true;
    var url = page.dataset.liveUrl +
      "?after_event=" + maxId("#events-body [id^='evt-']", "evt-") +
      "&after_metric=" + maxId("#events-body [id^='met-']", "met-") +
      "&after_log=" + maxId("#log-lines .log-line", "log-");
    htmx.ajax("GET", url, { source: page, swap: "none" }).finally(function () {
      catchingUp = false;
      // A push dropped while the catch-up was in flight may hold something it did not see.
      if (missedWhileCatchingUp > lastSeq) catchUp();
      missedWhileCatchingUp = 0;
    });
  }

  page.addEventListener("htmx:wsBeforeMessage", function (event) {
    var match = SEQ.exec(event.detail.message);
    if (!match) return;
    var seq = parseInt(match[1], 10);
    if (seq <= lastSeq) { event.preventDefault(); return; }
    if (catchingUp || seq > lastSeq + 1) {
      event.preventDefault();
      missedWhileCatchingUp = Math.max(missedWhileCatchingUp, seq);
      catchUp();
      return;
    }
    followLogs.prepare();
    lastSeq = seq;
  });

  // Whatever was pushed before the socket joined (between this page's render and the first
  // open, or while a reconnect was under way) never arrives: ask for it on every open.
  page.addEventListener("htmx:wsOpen", catchUp);

  // A catch-up response sets the marker to the sequence it is complete up to.
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    var marker = document.getElementById("job-live");
    if (marker) {
      var seq = parseInt(marker.dataset.seq, 10);
      if (seq > lastSeq) lastSeq = seq;
    }
  });

  // Logs follow the tail while the reader is at the bottom.
  var panel = document.getElementById("log-panel");
  var followLogs = {
    atBottom: true,
    prepare: function () {
      this.atBottom = panel.scrollTop + panel.clientHeight >= panel.scrollHeight - 24;
    },
  };
  new MutationObserver(function () {
    if (followLogs.atBottom) panel.scrollTop = panel.scrollHeight;
  }).observe(document.getElementById("log-lines"), { childList: true });
  panel.scrollTop = panel.scrollHeight;

  var systemToggle = document.getElementById("show-system");
  systemToggle.addEventListener("change", function () {
    panel.classList.toggle("hide-system", !systemToggle.checked);
  });

  // The loss chart: uPlot, one point per step. A point for a step the chart holds replaces
  // it when newer (a resumed attempt trains that step again). A resume marker drops the
  // points past its step, which the next attempt trains again, and draws a dashed line.
  var byStep = new Map(), resumes = [], plotted = new Set();
  var steps = [], losses = [];
  var chart = null;
  var chartBox = document.getElementById("loss-chart");
  function rebuild() {
    var keys = Array.from(byStep.keys()).sort(function (a, b) { return a - b; });
    steps = keys;
    losses = keys.map(function (k) { return byStep.get(k)[1]; });
    chartBox.dataset.points = String(steps.length);
    chartBox.dataset.gaps = String(losses.filter(function (l) { return l === null; }).length);
    chartBox.dataset.resumes = resumes.join(",");
    var card = document.getElementById("loss-card");
    if (card && card.hidden && steps.length) {  // a container job's first metric
      card.hidden = false;
      if (chart) chart.setSize({ width: chartBox.clientWidth || 600, height: 220 });
    }
    if (chart) chart.setData([steps, losses]);
  }
  // Points come as strict JSON: a NaN or infinite loss is null, drawn as a gap (the events
  // table shows the value). A payload that does not parse costs its own points, never the
  // chart or the feed.
  function parseList(text) {
    try {
      var points = JSON.parse(text);
      return Array.isArray(points) ? points : [];
    } catch (err) {
      console.warn("loss chart: unreadable points", err);
      return [];
    }
  }
  function addPoints(points) {
    points.forEach(function (p) {  // [metric id, step, loss]
      if (!Array.isArray(p) || typeof p[1] !== "number") return;
      if (plotted.has(p[0])) return;
      plotted.add(p[0]);
      var loss = typeof p[2] === "number" && isFinite(p[2]) ? p[2] : null;
      var held = byStep.get(p[1]);
      if (!held || held[0] < p[0]) byStep.set(p[1], [p[0], loss]);
    });
    rebuild();
  }
  function addResume(step) {
    if (resumes.indexOf(step) === -1) resumes.push(step);
    Array.from(byStep.keys()).forEach(function (k) { if (k > step) byStep.delete(k); });
    rebuild();
  }
  addPoints(parseList(document.getElementById("chart-initial").textContent));
  resumes = parseList(document.getElementById("chart-resumes").textContent);
  rebuild();
  function drawResumes(u) {
    var ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = cssVar("--chart-marker");
    ctx.setLineDash([5, 4]);
    ctx.lineWidth = 1.5;
    resumes.forEach(function (step) {
      // A restart from the beginning (step 0) sits left of the first step: mark the edge.
      var x = Math.max(u.bbox.left + 1, Math.round(u.valToPos(step, "x", true)));
      if (x > u.bbox.left + u.bbox.width) return;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    });
    ctx.restore();
  }
  // Colours come from the theme's CSS variables; a theme change draws the chart anew.
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function themedAxis(label) {
    var grid = cssVar("--chart-grid");
    return {
      label: label, stroke: cssVar("--chart-axis"), grid: { stroke: grid }, ticks: { stroke: grid },
    };
  }
  // The legend reads losses as the tables do (4 significant digits), and the last point
  // while no cursor is over the chart.
  var lossText = window.trainyardFormat.legendValue(function (v) { return window.trainyardFormat.sig(v); });
  var stepText = window.trainyardFormat.legendValue(String);
  var STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];
  function lossTicks(u, vals) { return vals.map(function (v) { return window.trainyardFormat.sig(v); }); }
  function drawChart() {
    if (typeof uPlot === "undefined") return;
    chart = new uPlot({
      width: chartBox.clientWidth || 600, height: 220,
      scales: { x: { time: false } },
      series: [{ label: "step", value: stepText }, { label: "loss", stroke: cssVar("--chart-line"), width: 2, value: lossText }],
      // Steps are whole numbers: no tick between two of them.
      axes: [
        Object.assign(themedAxis("step"), { incrs: STEP_INCREMENTS }),
        Object.assign(themedAxis("loss"), { values: lossTicks }),
      ],
      hooks: { draw: [drawResumes] },
    }, [steps, losses], chartBox);
  }
  drawChart();
  document.addEventListener("trainyard:themechange", function () {
    if (!chart) return;
    chart.destroy();
    drawChart();
  });
  new MutationObserver(function () {
    document.querySelectorAll("#chart-feed template").forEach(function (tpl) {
      if (tpl.classList.contains("chart-resume")) {
        addResume(parseInt(tpl.content.textContent, 10) || 0);
      } else {
        addPoints(parseList(tpl.content.textContent));
      }
      tpl.remove();
    });
  }).observe(document.getElementById("chart-feed"), { childList: true });
})();
