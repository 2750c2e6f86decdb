// Numbers and times for people, the browser half of apps/core/template_filters.py:
// - every <time datetime="…Z" data-style="datetime|time|date"> the server wrote in UTC is
//   rewritten in the browser's time zone (the UTC value stays in its title), on load and
//   whenever a live push adds or replaces one;
// - window.trainyardFormat offers the same rules to scripts (charts, live cells): usd and
//   usdMicros (apps/core/money.py format_usd: $1,234.50, $0.042, <$0.001), sig (4
//   significant digits, 1.235e7), sci (1.5e-4), duration (3m 12s), and legendValue, a
//   uPlot series `value` that shows the last point while no cursor is over the chart.
//   tests/core/test_formats_agree.py holds usd and sig to the server's and the CLI's table.
(function () {
  "use strict";

  function pad(n) { return n < 10 ? "0" + n : String(n); }

  function localText(date, style) {
    var time = pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
    var day = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate());
    if (style === "time") return time;
    if (style === "date") return day;
    return day + " " + time;
  }

  function localize(element) {
    if (element.dataset.localized === "1") return;
    var value = element.getAttribute("datetime");
    if (!value) return;
    var date = new Date(value);
    if (isNaN(date.getTime())) return;
    element.textContent = localText(date, element.dataset.style || "datetime");
    element.dataset.localized = "1";
  }

  function localizeWithin(root) {
    if (!root || !root.querySelectorAll) return;
    if (root.matches && root.matches("time[datetime]")) localize(root);
    root.querySelectorAll("time[datetime]").forEach(localize);
  }

  // %g's choice of notation with a short exponent, as Python's f"{x:.4g}" then `e7`.
  function sig(value, digits) {
    if (value === null || value === undefined) return "—";
    if (typeof value !== "number") value = Number(value);
    if (isNaN(value)) return "NaN";
    if (!isFinite(value)) return value > 0 ? "∞" : "-∞";
    digits = digits || 4;
    if (value === 0) return "0";
    var parts = value.toExponential(digits - 1).split("e");
    var exponent = Number(parts[1]);
    if (exponent < -4 || exponent >= digits) {
      return stripZeros(parts[0]) + "e" + exponent;
    }
    return stripZeros(value.toFixed(digits - 1 - exponent));
  }

  function stripZeros(text) {
    return text.indexOf(".") === -1 ? text : text.replace(/0+$/, "").replace(/\.$/, "");
  }

  // Money: integer micro-dollars, rounded half up in whole numbers (no float rounding).
  var MICROS = 1000000, CENT = 10000, TENTH = 1000;
  function roundHalfUp(micros, step) { return Math.floor((micros + step / 2) / step) * step; }
  function grouped(whole) { return String(whole).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  function usdMicros(micros) {
    if (micros === null || micros === undefined) return "—";
    micros = Math.round(micros);
    var sign = micros < 0 ? "-" : "", magnitude = Math.abs(micros);
    if (roundHalfUp(magnitude, TENTH) >= MICROS) {
      var cents = roundHalfUp(magnitude, CENT) / CENT;
      var fraction = cents % 100;
      return sign + "$" + grouped((cents - fraction) / 100) + "." + (fraction < 10 ? "0" : "") + fraction;
    }
    var tenths = roundHalfUp(magnitude, TENTH) / TENTH;
    if (tenths === 0) return magnitude === 0 ? "$0.00" : sign + "<$0.001";
    var decimals = ("00" + tenths).slice(-3);
    return sign + "$0." + (decimals.charAt(2) === "0" ? decimals.slice(0, 2) : decimals);
  }

  function usd(dollars) {
    if (dollars === null || dollars === undefined) return "—";
    return usdMicros(Math.round(Number(dollars) * MICROS));
  }

  // A uPlot series `value`: the point under the cursor, or the series' last point while no
  // cursor is over the chart (uPlot's own legend reads "--" then, under a drawn line).
  function legendValue(format) {
    return function (u, value, seriesIdx, idx) {
      if (idx === null || idx === undefined) {
        var ys = u.data[seriesIdx] || [];
        for (var i = ys.length - 1; i >= 0; i--) {
          if (ys[i] !== null && ys[i] !== undefined) return format(ys[i], i, seriesIdx);
        }
        return "—";
      }
      return value === null || value === undefined ? "—" : format(value, idx, seriesIdx);
    };
  }

  function sci(value) {
    if (value === null || value === undefined) return "—";
    if (value === 0) return "0";
    var magnitude = Math.abs(value);
    if (magnitude >= 0.01 && magnitude < 10000) return String(Number(value.toPrecision(3)));
    var parts = value.toExponential(1).split("e");
    var mantissa = parts[0].replace(/\.0$/, "");
    return mantissa + "e" + Number(parts[1]);
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    seconds = Math.max(0, Math.floor(seconds));
    var days = Math.floor(seconds / 86400), hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60), secs = seconds % 60;
    if (days) return days + "d " + hours + "h";
    if (hours) return hours + "h " + pad(minutes) + "m";
    if (minutes) return minutes + "m " + pad(secs) + "s";
    return secs + "s";
  }

  window.trainyardFormat = {
    usd: usd, usdMicros: usdMicros, sig: sig, sci: sci, duration: duration,
    legendValue: legendValue, localize: localizeWithin,
  };

  // A running job's duration (`live_duration`): the seconds elapsed when the server rendered
  // it, counted on from when this page received it.
  function tick() {
    var now = performance.now();
    document.querySelectorAll("[data-elapsed-s]").forEach(function (element) {
      if (!element.dataset.receivedAt) element.dataset.receivedAt = String(now);
      var elapsed = Number(element.dataset.elapsedS) + (now - Number(element.dataset.receivedAt)) / 1000;
      var text = duration(elapsed);
      if (element.textContent !== text) element.textContent = text;
    });
  }

  function start() {
    localizeWithin(document.body);
    tick();
    setInterval(tick, 1000);
    new MutationObserver(function (mutations) {
      mutations.forEach(function (mutation) {
        mutation.addedNodes.forEach(function (node) {
          if (node.nodeType === 1) localizeWithin(node);
        });
      });
    }).observe(document.body, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
