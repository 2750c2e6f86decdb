// The Billing page's spend chart: posted usage per day for the last 30 days, one series per
// project, stacked (each series is drawn as the running total of the projects before it,
// filled down to the one below). The cards and budget bars update over the websocket
// (server-rendered, see apps/billing/consumers.py); this file only draws.
(function () {
  "use strict";
  var box = document.getElementById("spend-chart");
  var source = document.getElementById("spend-data");
  if (!box || !source) return;
  var data;
  try {
    data = JSON.parse(source.textContent);
  } catch (err) {
    console.warn("spend chart: unreadable data", err);
    return;
  }
  var colors = ["#2f5bea", "#2e7d32", "#b26a00", "#8e24aa", "#00838f", "#c62828", "#5d4037"];
  var running = data.x.map(function () { return 0; });
  var stacked = data.series.map(function (s) {
    running = running.map(function (total, i) { return total + (s.values[i] || 0); });
    return running.slice();
  });
  box.dataset.series = String(data.series.length);
  if (typeof uPlot === "undefined" || !data.series.length) {
    box.textContent = data.series.length ? "" : "No spend in the last 30 days.";
    box.classList.toggle("empty", !data.series.length);
    return;
  }
  // Topmost total first, so each lower band is drawn over the one above it.
  var order = data.series.map(function (_, i) { return i; }).reverse();
  var series = [{}].concat(order.map(function (i) {
    var color = colors[i % colors.length];
    return {
      label: data.series[i].label,
      stroke: color,
      fill: color + "55",
      value: function (u, v, si, idx) {
        return idx == null ? "" : "$" + (data.series[i].values[idx] || 0).toFixed(2);
      },
    };
  }));
  new uPlot({
    width: box.clientWidth || 600,
    height: 240,
    series: series,
    axes: [{}, { values: function (u, vals) { return vals.map(function (v) { return "$" + v; }); } }],
  }, [data.x].concat(order.map(function (i) { return stacked[i]; })), box);
})();
