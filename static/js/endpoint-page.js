// An endpoint's page: its usage charts (requests per day; p50 and p95 latency per day), Copy
// buttons on the snippets, a confirm on Rollback and Stop, and the controls kept in step with
// the live status. The status, revisions and promotions update over the websocket
// (server-rendered partials, see apps/serving/consumers.py); this file never builds them.
(function () {
  "use strict";

  // Colours come from the theme's CSS variables; a theme change draws the charts anew.
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function axis(extra) {
    var grid = cssVar("--chart-grid");
    return Object.assign({
      stroke: cssVar("--chart-axis"), grid: { stroke: grid }, ticks: { stroke: grid },
    }, extra);
  }
  var charts = [];

  function drawCharts() {
    charts.forEach(function (chart) { chart.destroy(); });
    charts = [];
    var source = document.getElementById("usage-data");
    if (!source || typeof uPlot === "undefined") return;
    var data;
    try {
      data = JSON.parse(source.textContent);
    } catch (err) {
      console.warn("usage charts: unreadable data", err);
      return;
    }
    var requestsBox = document.getElementById("requests-chart");
    var latencyBox = document.getElementById("latency-chart");
    var series = cssVar("--chart-series").split(",").map(function (c) { return c.trim(); });
    // Legends show the point under the cursor, or the last one while no cursor is over.
    var legend = window.trainyardFormat.legendValue;
    var minute = legend(function (v) {
      var d = new Date(v * 1000);
      return ("0" + d.getHours()).slice(-2) + ":" + ("0" + d.getMinutes()).slice(-2);
    });
    if (requestsBox) {
      charts.push(new uPlot({
        width: requestsBox.clientWidth || 480,
        height: 200,
        series: [
          { value: minute },
          { label: "Requests", stroke: series[0], fill: series[0] + "33", value: legend(String) },
        ],
        axes: [axis({}), axis({})],
      }, [data.x, data.requests], requestsBox));
    }
    if (latencyBox) {
      var ms = legend(function (v) { return v + " ms"; });
      charts.push(new uPlot({
        width: latencyBox.clientWidth || 480,
        height: 200,
        spanGaps: false,
        series: [
          { value: minute },
          { label: "p50", stroke: series[1], value: ms, points: { show: true } },
          { label: "p95", stroke: series[2], value: ms, points: { show: true } },
        ],
        axes: [axis({}), axis({
          size: 70,
          values: function (u, vals) { return vals.map(function (v) { return v + " ms"; }); },
        })],
      }, [data.x, data.p50, data.p95], latencyBox));
    }
  }

  function setUpCopy() {
    if (!navigator.clipboard) return;
    document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
      var target = document.getElementById(button.dataset.copy);
      if (!target) return;
      button.hidden = false;
      button.addEventListener("click", function () {
        navigator.clipboard.writeText(target.textContent).then(function () {
          button.textContent = "Copied";
          setTimeout(function () { button.textContent = "Copy"; }, 1500);
        });
      });
    });
  }

  function setUpConfirms() {
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  }

  // The controls follow the status a push brought: Rollback shows when there is a revision to
  // go back to (and names it); a stopped endpoint has no controls.
  function syncControls() {
    var status = document.getElementById("endpoint-status");
    if (!status) return;
    var rollback = document.getElementById("rollback-form");
    if (rollback) rollback.hidden = status.dataset.rollback !== "true";
    var label = document.getElementById("rollback-to");
    if (label) label.textContent = status.dataset.previous || "";
    var controls = document.getElementById("endpoint-controls");
    if (controls) controls.hidden = status.dataset.state === "stopped";
  }

  document.addEventListener("htmx:wsAfterMessage", syncControls);
  document.addEventListener("trainyard:themechange", drawCharts);

  drawCharts();
  setUpCopy();
  setUpConfirms();
})();
