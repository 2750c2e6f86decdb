// A Copy button: <button type="button" data-copy-target="ID">Copy</button> puts the text of
// element ID on the clipboard and says so on the button (a polite live region) for two
// seconds. Where the page may not write the clipboard, the text is selected instead, so
// Ctrl+C copies it.
(function () {
  "use strict";

  function say(button, text) {
    var label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    button.textContent = text;
    setTimeout(function () { button.textContent = label; }, 2000);
  }

  function selectText(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copyTarget);
    if (!source) return;
    var text = source.textContent.trim();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { say(button, "Copied"); },
        function (error) {
          console.warn("copy: the clipboard refused", error);
          selectText(source);
          say(button, "Press Ctrl+C");
        }
      );
    } else {
      selectText(source);
      say(button, "Press Ctrl+C");
    }
  });
})();
