// The compare page's chart: one uPlot series per job, of the metric the picker shows.
// The server renders the points (#compare-series, inside the live region); each poll or
// pick replaces that region, and the chart reads the points again: the same data as a
// reload. Steps differ between jobs (eval every N steps, a job still running), so the
// series are aligned on the union of their steps: a step a job has no point at is
// `undefined`, which uPlot joins over; a NaN or infinite value comes as null, a gap.
(function () {
  "use strict";
  var box = document.getElementById("compare-chart");
  if (!box) return;
  var chart = null, drawnMetric = null, current = null;
  var STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

  function read() {
    var source = document.getElementById("compare-series");
    if (!source) return null;
    try {
      return JSON.parse(source.textContent);
    } catch (err) {
      console.warn("compare chart: unreadable points", err);
      return null;
    }
  }

  function aligned(data) {
    var steps = new Set();
    data.jobs.forEach(function (job) {
      job.points.forEach(function (p) { steps.add(p[0]); });
    });
    var xs = Array.from(steps).sort(function (a, b) { return a - b; });
    var index = new Map(xs.map(function (x, i) { return [x, i]; }));
    var columns = data.jobs.map(function (job) {
      var ys = new Array(xs.length);  // undefined where the job has no point
      job.points.forEach(function (p) { ys[index.get(p[0])] = p[1]; });
      return ys;
    });
    return [xs].concat(columns);
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function axis(label) {
    var grid = cssVar("--chart-grid");
    return { label: label, stroke: cssVar("--chart-axis"), grid: { stroke: grid }, ticks: { stroke: grid } };
  }
  // Each job's value under the cursor, or its last one while no cursor is over the chart.
  var valueText = window.trainyardFormat.legendValue(function (v) { return window.trainyardFormat.sig(v); });
  var stepText = window.trainyardFormat.legendValue(String);

  function mark(data) {
    box.dataset.metric = data.metric || "";
    box.dataset.series = String(data.jobs.length);
    box.dataset.points = data.jobs.map(function (job) { return job.points.length; }).join(",");
  }

  function draw(data) {
    if (chart) chart.destroy();
    chart = null;
    drawnMetric = data.metric;
    if (typeof uPlot === "undefined") return;
    var colors = cssVar("--chart-series").split(",").map(function (c) { return c.trim(); });
    var series = [{ label: "step", value: stepText }].concat(data.jobs.map(function (job, i) {
      return { label: job.name, stroke: colors[i % colors.length], width: 2, value: valueText };
    }));
    chart = new uPlot({
      width: box.clientWidth || 600, height: 260,
      scales: { x: { time: false } },
      series: series,
      // Steps are whole numbers: no tick between two of them.
      axes: [Object.assign(axis("step"), { incrs: STEP_INCREMENTS }), axis(data.metric || "")],
    }, aligned(data), box);
  }

  // The picker offers every metric any job has recorded so far: a job that is still
  // running may add one, and a page opened before the first point had none.
  var picker = document.getElementById("metric-picker");
  function syncPicker(data) {
    if (!picker) return;
    var names = data.names || [];
    var have = Array.from(picker.options).map(function (o) { return o.value; });
    if (names.length && have.join("\n") !== names.join("\n")) {
      picker.replaceChildren.apply(picker, names.map(function (name) {
        var option = document.createElement("option");
        option.value = name;
        option.textContent = name;
        return option;
      }));
    }
    if (data.metric) picker.value = data.metric;
    picker.disabled = !names.length;
  }

  function update() {
    var data = read();
    if (!data) return;
    current = data;
    mark(data);
    syncPicker(data);
    if (!chart || data.metric !== drawnMetric) draw(data);
    else chart.setData(aligned(data));
    box.setAttribute("aria-label", (data.metric || "metric") + " of each job by step");
  }

  function showLive() {
    var live = document.getElementById("compare-live");
    var indicator = document.getElementById("live-indicator");
    if (live && indicator) indicator.classList.toggle("on", live.dataset.live === "1");
  }

  update();
  // A poll or a pick replaced the live region (an outerHTML swap, a new child of the page's
  // main element): its points are the newest, and it says whether polling goes on.
  var region = document.getElementById("compare-live");
  new MutationObserver(function () {
    update();
    showLive();
  }).observe(region.parentNode, { childList: true });
  document.addEventListener("trainyard:themechange", function () {
    if (current) draw(current);
  });
})();
