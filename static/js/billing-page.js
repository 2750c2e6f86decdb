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
  // Colours come from the theme's CSS variables; a theme change draws the chart anew.
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
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
  // Tick steps the money formatter reads exactly: never below a tenth of a cent, never a
  // quarter step ($0.0025 would read "$0.003").
  var MONEY_INCREMENTS = [];
  for (var decade = 0.001; decade < 1e7; decade *= 10) {
    [1, 2, 5].forEach(function (m) { MONEY_INCREMENTS.push(Number((m * decade).toPrecision(1))); });
  }
  // Topmost total first, so each lower band is drawn over the one above it.
  var order = data.series.map(function (_, i) { return i; }).reverse();
  function draw() {
    // --chart-series holds 6-digit hex colours (a fill appends an alpha byte).
    var colors = cssVar("--chart-series").split(",").map(function (c) { return c.trim(); });
    var grid = cssVar("--chart-grid");
    function axis(extra) {
      return Object.assign({
        stroke: cssVar("--chart-axis"), grid: { stroke: grid }, ticks: { stroke: grid },
      }, extra);
    }
    var fmt = window.trainyardFormat;
    var series = [{
      value: fmt.legendValue(function (v) { return new Date(v * 1000).toISOString().slice(0, 10); }),
    }].concat(order.map(function (i) {
      var color = colors[i % colors.length];
      return {
        label: data.series[i].label,
        stroke: color,
        fill: color + "55",
        // The day's own spend (not the stacked total), as the cards read money.
        value: fmt.legendValue(function (v, idx) { return fmt.usd(data.series[i].values[idx] || 0); }),
      };
    }));
    return new uPlot({
      width: box.clientWidth || 600,
      height: 240,
      series: series,
      axes: [axis({}), axis({
        incrs: MONEY_INCREMENTS,
        values: function (u, vals) {
          var labels = vals.map(fmt.usd);
          // What the axis reads, for people and tests alike (the canvas has no text).
          box.dataset.ticks = JSON.stringify(vals.map(function (v, i) { return [v, labels[i]]; }));
          return labels;
        },
        size: 60,
      })],
    }, [data.x].concat(order.map(function (i) { return stacked[i]; })), box);
  }
  var chart = draw();
  document.addEventListener("trainyard:themechange", function () {
    chart.destroy();
    chart = draw();
  });
})();
