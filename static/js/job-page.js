// The job page: trusts the websocket only as far as its sequence numbers allow.
// Each push carries the job's live sequence number (#job-live data-seq). A push at or below
// what the page holds is a duplicate and is dropped; one that skips a number means a push
// was lost, so the page fetches everything newer than the ids it holds (the same partials)
// instead. After a reconnect it does the same. The loss chart grows from pushed points.
(function () {
  "use strict";
  var page = document.getElementById("job-page");
  if (!page) return;
  var lastSeq = parseInt(page.dataset.seq, 10) || 0;
  var opened = false;
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

  page.addEventListener("htmx:wsOpen", function () {
    if (opened) catchUp();  // a reconnect: whatever was pushed meanwhile is lost
    opened = true;
  });

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

  // The loss chart: uPlot, fed by appended points, never re-rendered from scratch.
  var steps = [], losses = [], plotted = new Set();
  var chart = null;
  var chartBox = document.getElementById("loss-chart");
  function addPoints(points) {
    points.forEach(function (p) {  // [metric id, step, loss]
      if (plotted.has(p[0])) return;
      plotted.add(p[0]);
      steps.push(p[1]);
      losses.push(p[2]);
    });
    chartBox.dataset.points = String(steps.length);
    if (chart) chart.setData([steps, losses]);
  }
  addPoints(JSON.parse(document.getElementById("chart-initial").textContent));
  function drawChart() {
    if (typeof uPlot === "undefined") return;
    chart = new uPlot({
      width: chartBox.clientWidth || 600, height: 220,
      scales: { x: { time: false } },
      series: [{ label: "step" }, { label: "loss", stroke: "#2f5bea", width: 2 }],
      axes: [{ label: "step" }, { label: "loss" }],
    }, [steps, losses], chartBox);
  }
  drawChart();
  new MutationObserver(function () {
    document.querySelectorAll("#chart-feed template.chart-points").forEach(function (tpl) {
      addPoints(JSON.parse(tpl.content.textContent));
      tpl.remove();
    });
  }).observe(document.getElementById("chart-feed"), { childList: true });
})();
