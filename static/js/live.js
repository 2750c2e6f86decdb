// Live pages: what every page with a websocket shares.
// - Rows pushed with an out-of-band "beforeend"/"afterbegin" swap replace a row the page
//   already has (same id) instead of adding a second one; new rows are added as asked.
// - A "live" indicator shows whether the socket is open.
(function () {
  "use strict";

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var fragment = event.detail.fragment;
    if (!fragment || !fragment.children) return;
    Array.from(fragment.children).forEach(function (child) {
      if (!child.id) return;
      var existing = document.getElementById(child.id);
      if (existing && existing !== event.detail.target) {
        existing.replaceWith(child);
      }
    });
  });

  function setLive(on) {
    var indicator = document.getElementById("live-indicator");
    if (indicator) indicator.classList.toggle("on", on);
  }
  document.addEventListener("htmx:wsOpen", function () { setLive(true); });
  document.addEventListener("htmx:wsClose", function () { setLive(false); });
})();
