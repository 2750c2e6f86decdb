// Numbers and times for people, the browser half of apps/core/template_filters.py:
// - every <time datetime="…Z" data-style="datetime|time|date"> the server wrote in UTC is
//   rewritten in the browser's time zone (the UTC value stays in its title), on load and
//   whenever a live push adds or replaces one;
// - window.trainyardFormat offers the same rules to scripts (chart tooltips): sig (4
//   significant digits), sci (1.5e-4), duration (3m 12s).
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

  function sig(value, digits) {
    if (value === null || value === undefined) return "—";
    if (typeof value !== "number") value = Number(value);
    if (isNaN(value)) return "NaN";
    if (!isFinite(value)) return value > 0 ? "∞" : "-∞";
    return String(Number(value.toPrecision(digits || 4)));
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

  window.trainyardFormat = { sig: sig, sci: sci, duration: duration, localize: localizeWithin };

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
