// The jobs lists' Compare button. A live push replaces a job's row (js/live.js), and with it
// its checkbox: the picked ids are kept here and ticked again after every swap. The form
// goes to the compare page as ?ids=a,b (without this script it sends ?ids=a&ids=b, which
// the page reads too).
(function () {
  "use strict";
  var form = document.getElementById("compare-form");
  if (!form) return;
  var MIN = 2, MAX = 10;
  var picked = [];
  var count = document.getElementById("compare-count");
  var button = document.getElementById("compare-button");

  function boxes() {
    return document.querySelectorAll('input[type="checkbox"][form="compare-form"]');
  }
  function show() {
    boxes().forEach(function (box) { box.checked = picked.indexOf(box.value) !== -1; });
    var n = picked.length;
    button.disabled = n < MIN || n > MAX;
    count.textContent = n === 0 ? "Tick 2 to 10 jobs to compare them."
      : n + " picked" + (n < MIN ? ": tick at least 2." : n > MAX ? ": at most 10." : ".");
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches('input[type="checkbox"][form="compare-form"]')) return;
    var at = picked.indexOf(box.value);
    if (box.checked && at === -1) picked.push(box.value);
    if (!box.checked && at !== -1) picked.splice(at, 1);
    show();
  });
  document.addEventListener("htmx:oobAfterSwap", show);
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (picked.length < MIN || picked.length > MAX) return;
    window.location.assign(form.action + "?ids=" + picked.map(encodeURIComponent).join(","));
  });
  // A page restored from the back-forward cache keeps its ticks: start from them.
  boxes().forEach(function (box) { if (box.checked) picked.push(box.value); });
  show();
})();
